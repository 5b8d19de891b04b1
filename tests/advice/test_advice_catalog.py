"""The shipped catalog (every row cites its page and the date read; the families the issue names are
there; every card the fake NVML plays is known by its name), the user's rows in [advice] (added,
replacing, refused naming the row and the field) and the node's recognition."""

from __future__ import annotations

import re

import pytest

from agent.advice.catalog import Card, CatalogError, merged, parse, shipped
from agent.advice.recognise import METADATA, NVML, NVML_HOST, recognise
from agent.config import ConfigError, parse_config
from agent.devtools.fake_nvml import PRODUCTS

URL = re.compile(r"^https://[a-z0-9.-]+\.[a-z]+/\S*$")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
GIB = 2**30


def test_every_row_cites_a_public_page_and_the_date_read():
    cat = shipped()
    rows = [*cat.cards.items(), *cat.instances.items()]
    assert len(cat.cards) >= 12 and len(cat.instances) >= 60
    for name, row in rows:
        assert URL.match(row.source), f"{name}: source {row.source!r} is no https URL"
        assert DATE.match(row.read), f"{name}: read {row.read!r} is no date"


def test_the_catalog_has_the_families_and_cards_the_issue_names():
    cat = shipped()
    families = {i.family for i in cat.instances.values()}
    wanted = {
        *("gn6i", "gn6v", "gn7", "gn7i", "gn7e", "gn8is", "gn8v"),
        *("ebmgn6i", "ebmgn6v", "ebmgn7", "ebmgn7i", "ebmgn7e", "ebmgn8is", "ebmgn8v"),
        *("g5", "g6", "g6e", "p4d", "p5", "a2-highgpu", "a2-ultragpu", "a3-highgpu", "g2"),
        *("NC_A100_v4", "ND_A100_v4", "NC_H100_v5", "ND_H100_v5"),
    }
    assert wanted <= families, sorted(wanted - families)
    cards = {"T4", "A10", "A10G", "L4", "L20", "L40S", "A100-40GB", "A100-80GB", "H20", "H100-SXM", "H200"}
    assert cards <= set(cat.cards)
    for inst in cat.instances.values():
        assert inst.rdma in ("none", "erdma", "efa", "infiniband", "roce", "tcpx")


def test_the_cards_figures_keep_their_known_order():
    # a typo of a factor of ten would turn every ranking around: the orders every datasheet agrees on
    c = shipped().cards
    tf = {k: v.tensor_tflops for k, v in c.items()}
    assert tf["T4"] < tf["A10"] < tf["A100-80GB"] < tf["L40S"] < tf["H100-SXM"] == tf["H200"]
    assert tf["H20"] < tf["A100-80GB"]  # the export part: a third of an A100's tensor throughput
    bw = {k: v.bandwidth_gbs for k, v in c.items()}
    assert bw["L4"] < bw["T4"] < bw["A10"] < bw["L20"] == bw["L40S"] < bw["A100-40GB"] < bw["H100-SXM"]
    assert bw["H100-SXM"] < bw["H20"] < bw["H200"]


def test_every_card_the_fake_nvml_plays_is_known_by_its_name():
    cat = shipped()
    for product in PRODUCTS.values():
        assert cat.card_named(product.name) is not None, product.name
    assert cat.card_named("NVIDIA A100-SXM4-80GB") == "A100-80GB"
    assert cat.card_named("NVIDIA A10") == "A10"  # not the A100 nor the A10G


def test_a_bad_catalog_row_is_refused_naming_the_row_and_the_field():
    with pytest.raises(CatalogError, match=r'card "X": bandwidth_gbs: Input should be greater than 0'):
        parse({"cards": {"X": {"tensor_tflops": 1, "bandwidth_gbs": 0, "memory_gb": 1}}})
    fam = {"cloud": "c", "card": "Y", "nvlink": False, "rdma": "none", "source": "s", "read": "r"}
    fam["sizes"] = [{"id": "y.1", "gpus": 1, "vcpus": 1, "memory_gib": 1, "network_gbps": 1}]
    with pytest.raises(CatalogError, match=r'instance "y.1": card: "Y" is no card of the catalog'):
        parse({"families": {"f": fam}})
    with pytest.raises(CatalogError, match=r'family "f": rdma: '):
        parse({"families": {"f": {**fam, "rdma": "carrier-pigeon"}}})


def test_config_rows_add_replace_and_are_refused_by_name():
    cfg = parse_config(
        {
            "advice": {
                "cards": {"B200": {"tensor_tflops": 2250.0, "bandwidth_gbs": 8000.0, "memory_gb": 180.0}},
                "instances": {
                    "my.b200": {"cloud": "aws", "card": "B200", "gpus": 8, "vcpus": 192, "memory_gib": 2048,
                                "network_gbps": 3200, "nvlink": True, "rdma": "efa"},
                    "p5.48xlarge": {"cloud": "aws", "card": "H100-SXM", "gpus": 8, "vcpus": 192,
                                    "memory_gib": 2048, "network_gbps": 800},
                },
                "prices": {"my.b200": 60.0},
            }
        }
    )  # fmt: skip
    cat = merged(shipped(), cfg.advice.cards, cfg.advice.instances)
    assert cat.instances["my.b200"].id == "my.b200" and cat.instances["my.b200"].source == "your config"
    assert cat.instances["p5.48xlarge"].network_gbps == 800  # the user's row replaces the shipped one
    assert shipped().instances["p5.48xlarge"].network_gbps == 3200
    with pytest.raises(ConfigError) as e:
        parse_config({"advice": {"instances": {"my.x": {"cloud": "aws", "card": "L4", "gpus": 0}}}})
    assert "advice.instances.my.x.gpus: Input should be greater than 0" in e.value.render()
    assert "advice.instances.my.x.vcpus: Field required" in e.value.render()
    with pytest.raises(ConfigError, match=r'instance "my.x": card: "Z9" is no card of the catalog'):
        row = {"cloud": "aws", "card": "Z9", "gpus": 1, "vcpus": 4, "memory_gib": 16, "network_gbps": 10}
        parse_config({"advice": {"instances": {"my.x": row}}})
    with pytest.raises(ConfigError, match=r'prices."g5.xlarge": a price per instance-hour must be above 0'):
        parse_config({"advice": {"prices": {"g5.xlarge": -1.0}}})


def test_the_node_is_the_metadata_s_type_when_its_gpus_agree():
    cat = shipped()
    node, notes = recognise(cat, "ecs.gn8v-4x.12xlarge", "alibaba", ["NVIDIA H20"] * 4, 48, 384 * GIB)
    assert node is not None and (node.id, node.source, node.card, node.gpus) == (
        "ecs.gn8v-4x.12xlarge", METADATA, "H20", 4
    )  # fmt: skip
    assert node.network_gbps == 25 and notes == []


def test_where_metadata_and_nvml_disagree_nvml_is_taken_and_said():
    cat = shipped()
    # the demo: the simulator plays an A10 type, the fake NVML four H100s
    node, notes = recognise(
        cat, "ecs.gn7i-c8g1.2xlarge", "alibaba", ["NVIDIA H100 80GB HBM3"] * 4, 16, 64 * GIB
    )
    assert node is not None and (node.card, node.gpus, node.source, node.cloud) == (
        "H100-SXM",
        4,
        NVML,
        "alibaba",
    )
    assert node.network_gbps is None
    assert any("NVML is taken" in n for n in notes) and any("network is not known" in n for n in notes)


def test_without_metadata_a_row_matching_gpus_cpus_and_memory_is_found():
    cat = shipped()
    node, notes = recognise(cat, None, None, ["NVIDIA H100 80GB HBM3"] * 8, 192, 2000 * GIB)
    assert node is not None and (node.id, node.source) == ("p5.48xlarge", NVML_HOST)
    unknown, notes = recognise(cat, None, None, ["NVIDIA B300"], 8, None)
    assert unknown is None and any("[advice.cards]" in n for n in notes)


def test_a_card_added_in_the_config_is_recognised():
    cat = merged(shipped(), {"B200": Card(nvml_names=("NVIDIA B200",), tensor_tflops=2250, bandwidth_gbs=8000,
                                          memory_gb=180)}, {})  # fmt: skip
    node, _ = recognise(cat, None, "aws", ["NVIDIA B200"] * 8, 224, None)
    assert node is not None and node.card == "B200" and node.source == NVML


def test_docs_list_every_catalog_source_and_note():
    # docs/advice.md "Sources, as read" is the catalog's table: a row edited without it goes stale
    from conftest import REPO

    doc = (REPO / "docs" / "advice.md").read_text()
    cat = shipped()
    for name, row in [*cat.cards.items(), *cat.instances.items()]:
        assert f"<{row.source}> ({row.read})" in doc, name
        assert row.source_note in doc, name
