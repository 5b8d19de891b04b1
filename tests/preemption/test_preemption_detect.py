"""Cloud auto-detection from DMI files only (fake sysfs trees), as cloud-init's ds-identify does."""

from __future__ import annotations

import subprocess
import sys

import pytest
from preemption_helpers import REPO

from agent.preemption.clouds.azure import AZURE_ASSET_TAG
from agent.preemption.detect import detect


def fake_sysfs(tmp_path, **files: str):
    d = tmp_path / "sys" / "class" / "dmi" / "id"
    d.mkdir(parents=True)
    for name, value in files.items():
        (d / name).write_text(value + "\n")
    return tmp_path / "sys"


@pytest.mark.parametrize(
    ("files", "provider"),
    [
        ({"sys_vendor": "Alibaba Cloud", "product_name": "Alibaba Cloud ECS"}, "alibaba"),
        ({"sys_vendor": "QEMU", "product_name": "Alibaba Cloud ECS"}, "alibaba"),
        ({"sys_vendor": "Amazon EC2", "product_name": "p4d.24xlarge"}, "aws"),
        ({"sys_vendor": "Xen", "product_name": "HVM domU", "bios_version": "4.11.amazon"}, "aws"),
        ({"sys_vendor": "Google", "product_name": "Google Compute Engine"}, "gcp"),
        (
            {
                "sys_vendor": "Microsoft Corporation",
                "product_name": "Virtual Machine",
                "chassis_asset_tag": AZURE_ASSET_TAG,
            },
            "azure",
        ),
        ({"sys_vendor": "Tencent Cloud", "product_name": "CVM"}, "tencent"),
        # Hyper-V on premises looks like Azure except for the asset tag
        ({"sys_vendor": "Microsoft Corporation", "product_name": "Virtual Machine"}, "none"),
        ({"sys_vendor": "Dell Inc.", "product_name": "PowerEdge XE9680"}, "none"),
        ({"sys_vendor": "QEMU", "product_name": "Standard PC (Q35 + ICH9, 2009)"}, "none"),
    ],
)
def test_dmi_decides(tmp_path, files, provider):
    found = detect(fake_sysfs(tmp_path, **files))
    assert found.provider == provider, found
    assert "DMI" in found.evidence


def test_no_dmi_at_all_is_none(tmp_path):
    (tmp_path / "sys").mkdir()
    found = detect(tmp_path / "sys")
    assert found.provider == "none" and "no DMI information" in found.evidence
    assert detect(tmp_path / "missing").provider == "none"


def test_unreadable_or_huge_files_do_not_break_detection(tmp_path):
    sysfs = fake_sysfs(tmp_path, sys_vendor="Alibaba Cloud")
    (sysfs / "class" / "dmi" / "id" / "product_name").mkdir()  # a directory where a file should be
    (sysfs / "class" / "dmi" / "id" / "chassis_asset_tag").write_bytes(b"\xff" * 100000)
    assert detect(sysfs).provider == "alibaba"


def test_detect_cloud_command(tmp_path):
    sysfs = fake_sysfs(tmp_path, sys_vendor="Google", product_name="Google Compute Engine")
    out = subprocess.run(
        [sys.executable, "-m", "agent", "detect-cloud", "--sysfs", str(sysfs)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert "sys_vendor         Google" in out.stdout and "provider           gcp" in out.stdout
