"""Which metric names a PromQL expression (or a Grafana query using one) refers to."""

from __future__ import annotations

import re

import yaml

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
# a whole identifier (no backtracking into a shorter one) not followed by "(": not a function
_IDENT = re.compile(r"(?<![\w.$:])[a-zA-Z_:][a-zA-Z0-9_:]*(?![a-zA-Z0-9_:]|\s*\()")
_KEYWORDS = {
    "and",
    "or",
    "unless",
    "offset",
    "bool",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
    "start",
    "end",
}
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(.*?),\s*\w+\s*\)\s*$", re.S)


def metric_names(expr: str) -> set[str]:
    """Metric names in ``expr``: identifiers that are not label names (in ``{...}`` or grouping
    clauses), functions, keywords, durations or Grafana variables."""
    m = _LABEL_VALUES.match(expr)  # Grafana's label_values(metric{...}, label)
    if m:
        expr = m.group(1)
    s = _STRING.sub('""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = _GROUPING.sub(" ", s)
    return {t for t in _IDENT.findall(s) if t.lower() not in _KEYWORDS}


def recorded_names(rules_yaml: str) -> set[str]:
    doc = yaml.safe_load(rules_yaml)
    return {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}
