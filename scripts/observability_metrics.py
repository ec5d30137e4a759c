#!/usr/bin/env python3
"""The metric names PushRelay's dashboard and alert rules query, and checks on them.

Used by scripts/check-observability.sh:

  observability_metrics.py self-test
      runs the PromQL name extractor on known expressions;
  observability_metrics.py check-dashboard DASHBOARD.json
      the dashboard parses, every panel has a datasource and at least one query;
  observability_metrics.py check-rules RULES.yml TESTS.yml
      every alert has a severity label, summary/description/runbook/runbook_url
      annotations (the runbook_url ending in #alert-<lowercased name>), and the promtool
      tests have, for every alert, a case where it fires and one where it does not;
  observability_metrics.py check-names METRICS RULES.yml DASHBOARD.json
      every metric a panel, a template variable or a rule queries is in METRICS, or is
      recorded by a rule, or is one Prometheus makes itself (`up`, `scrape_*`, `ALERTS`).

METRICS lists the series names the services export: one name a line (`#` starts a
comment), or simply a scrape of /metrics (exposition format; a `# TYPE x histogram`
line stands for x_bucket, x_sum and x_count).

The extractor is a tokenizer, not a full PromQL parser: a metric name is an identifier
that is not a function or aggregation, not a keyword, not inside `{…}` (label
matchers), `[…]` (ranges, subqueries) or the label list after by/without/on/ignoring/
group_left/group_right, not a Grafana variable ($x, ${x}, $__rate_interval) and not a
number or duration. `{__name__="x"}` names x.
"""
import json
import re
import sys

FUNCTIONS = {
    # aggregation operators
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
    # functions (Prometheus 2.x/3.x)
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg",
    "delta", "deriv", "exp", "floor", "histogram_avg", "histogram_count", "histogram_fraction",
    "histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum", "holt_winters",
    "double_exponential_smoothing", "hour", "idelta", "increase", "info", "irate", "label_join",
    "label_replace", "last_over_time", "ln", "log10", "log2", "mad_over_time", "max_over_time",
    "min_over_time", "minute", "month", "pi", "predict_linear", "present_over_time",
    "quantile_over_time", "rad", "rate", "resets", "round", "scalar", "sgn", "sin", "sinh",
    "sort", "sort_by_label", "sort_by_label_desc", "sort_desc", "sqrt", "stddev_over_time",
    "stdvar_over_time", "sum_over_time", "tan", "tanh", "time", "timestamp", "vector", "year",
    # the @ modifier's start() and end()
    "start", "end",
}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "atan2", "inf", "nan"}
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
# Series Prometheus itself adds to every scrape or evaluation.
IMPLICIT = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
            "scrape_samples_post_metric_relabeling", "scrape_series_added", "ALERTS", "ALERTS_FOR_STATE"}

TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<variable>\$\{[^}]*\}|\$\w+|\[\[\w+\]\])
  | (?P<number>(?:0[xX][0-9a-fA-F]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(?:(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<other>.)
""", re.X | re.S)


def tokens(expr):
    out = []
    for m in TOKEN.finditer(expr):
        kind = m.lastgroup
        if kind in ("space", "comment"):
            continue
        out.append((kind, m.group()))
    return out


def metric_names(expr):
    """The metric names one PromQL expression (possibly with Grafana variables) selects."""
    toks = tokens(expr)
    names = set()
    i, n = 0, len(toks)
    while i < n:
        kind, text = toks[i]
        if kind == "other" and text == "{":
            # Label matchers: only {__name__="x"} names a metric.
            j = i + 1
            while j < n and toks[j][1] != "}":
                if (toks[j] == ("ident", "__name__") and j + 2 < n and toks[j + 1][1] == "="
                        and toks[j + 2][0] == "string"):
                    names.add(toks[j + 2][1][1:-1])
                j += 1
            i = j + 1
            continue
        if kind == "other" and text == "[":
            depth, j = 1, i + 1
            while j < n and depth:
                if toks[j][1] == "[":
                    depth += 1
                elif toks[j][1] == "]":
                    depth -= 1
                j += 1
            i = j
            continue
        if kind == "ident":
            nxt = toks[i + 1] if i + 1 < n else (None, None)
            if text in LABEL_LIST_KEYWORDS:
                if nxt[1] == "(":  # skip the label list
                    j = i + 2
                    while j < n and toks[j][1] != ")":
                        j += 1
                    i = j + 1
                    continue
            elif text in KEYWORDS or text.lower() in ("inf", "nan"):
                pass
            elif text in FUNCTIONS or nxt[1] == "(":
                pass  # a function or aggregation (or one this list does not know yet)
            else:
                names.add(text)
        i += 1
    return names


def grafana_query_names(query):
    """Metric names of a Grafana Prometheus template variable query."""
    if isinstance(query, dict):
        query = query.get("query", "")
    query = (query or "").strip()
    m = re.fullmatch(r"label_values\((.*),\s*[A-Za-z_]\w*\s*\)", query, re.S)
    if m:
        return metric_names(m.group(1))
    if re.fullmatch(r"label_values\(\s*[A-Za-z_]\w*\s*\)", query) or re.fullmatch(r"label_names\(.*\)", query, re.S):
        return set()
    m = re.fullmatch(r"(?:metrics|query_result)\((.*)\)", query, re.S)
    if m:
        return metric_names(m.group(1)) if query.startswith("query_result") else set()
    return metric_names(query) if query else set()


# ------------------------------------------------------------------ files
def dashboard_panels(dashboard):
    """Every panel, rows' nested panels included (a collapsed row holds its panels)."""
    for panel in dashboard.get("panels", []):
        yield panel
        for inner in panel.get("panels", []) or []:
            yield inner


def dashboard_exprs(dashboard):
    """(where, expr) for every panel query and every query template variable."""
    out = []
    for panel in dashboard_panels(dashboard):
        for target in panel.get("targets", []) or []:
            if target.get("expr"):
                out.append((f'panel "{panel.get("title")}" {target.get("refId", "")}', target["expr"], False))
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            out.append((f'variable ${var.get("name")}', var.get("query") or var.get("definition", ""), True))
    return out


def check_dashboard(path):
    failures = []
    try:
        dashboard = json.load(open(path))
    except (OSError, ValueError) as error:
        return [f"{path}: does not parse as JSON: {error}"]
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    if variables.get("datasource", {}).get("type") != "datasource":
        failures.append(f"{path}: no `datasource` template variable of type datasource")
    ids = [p.get("id") for p in dashboard_panels(dashboard)]
    if len(ids) != len(set(ids)):
        failures.append(f"{path}: panel ids are not unique")
    count = 0
    for panel in dashboard_panels(dashboard):
        if panel.get("type") == "row":
            continue
        count += 1
        title = panel.get("title") or f'id {panel.get("id")}'
        if not panel.get("datasource"):
            failures.append(f'{path}: panel "{title}" has no datasource')
        targets = panel.get("targets") or []
        if not targets:
            failures.append(f'{path}: panel "{title}" has no target')
        for target in targets:
            if not (target.get("expr") or "").strip():
                failures.append(f'{path}: panel "{title}" target {target.get("refId")} has no expr')
            elif not metric_names(target["expr"]):
                failures.append(f'{path}: panel "{title}" target {target.get("refId")} queries no metric')
    if not count:
        failures.append(f"{path}: no panels")
    return failures


def load_yaml(path):
    try:
        import yaml
    except ImportError:
        sys.exit("PyYAML is missing: python3 -m pip install pyyaml")
    return yaml.safe_load(open(path))


def rule_exprs(path):
    """(where, expr) per rule, and the names the rules record."""
    out, recorded = [], set()
    for group in (load_yaml(path) or {}).get("groups", []):
        for rule in group.get("rules", []):
            where = f'{path}: {"alert " + rule["alert"] if "alert" in rule else "record " + rule.get("record", "?")}'
            out.append((where, str(rule.get("expr", "")), False))
            if "record" in rule:
                recorded.add(rule["record"])
    return out, recorded


def exported_names(path):
    names = set()
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        m = re.match(r"#\s*TYPE\s+(\S+)\s+(\w+)", line)
        if m:
            name, kind = m.groups()
            if kind == "histogram":
                names |= {name + "_bucket", name + "_sum", name + "_count"}
            elif kind == "summary":
                names |= {name, name + "_sum", name + "_count"}
            else:
                names.add(name)
            continue
        if line.startswith("#"):
            continue
        m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)", line)
        if m:
            names.add(m.group(1))
    return names


def check_names(metrics_path, rules_path, dashboard_path):
    exported = exported_names(metrics_path)
    exprs, recorded = rule_exprs(rules_path)
    dashboard = json.load(open(dashboard_path))
    exprs += [(f"{dashboard_path}: {w}", e, v) for w, e, v in dashboard_exprs(dashboard)]
    available = exported | recorded | IMPLICIT
    missing = {}
    for where, expr, is_variable in exprs:
        names = grafana_query_names(expr) if is_variable else metric_names(expr)
        for name in sorted(names - available):
            missing.setdefault(name, []).append(where)
    for name in sorted(missing):
        print(f"missing: {name} (queried by {'; '.join(missing[name])})")
    return not missing, len(exprs)


SEVERITIES = {"critical", "warning", "info"}
ANNOTATIONS = {"summary", "description", "runbook", "runbook_url"}


def check_rules(rules_path, tests_path):
    failures, alerts = [], set()
    for group in (load_yaml(rules_path) or {}).get("groups", []):
        for rule in group.get("rules", []):
            if "alert" not in rule:
                continue
            name = rule["alert"]
            alerts.add(name)
            if (rule.get("labels") or {}).get("severity") not in SEVERITIES:
                failures.append(f"alert {name}: severity label is not one of {sorted(SEVERITIES)}")
            annotations = rule.get("annotations") or {}
            for key in sorted(ANNOTATIONS - set(annotations)):
                failures.append(f"alert {name}: no {key} annotation")
            url = annotations.get("runbook_url", "")
            if url and not url.endswith("#alert-" + name.lower()):
                failures.append(f"alert {name}: runbook_url {url} does not end in #alert-{name.lower()}")
    fires, quiet = set(), set()
    for test in (load_yaml(tests_path) or {}).get("tests", []):
        for case in test.get("alert_rule_test", []) or []:
            (fires if case.get("exp_alerts") else quiet).add(case.get("alertname"))
    for name in sorted(alerts):
        if name not in fires:
            failures.append(f"alert {name}: no test case where it fires")
        if name not in quiet:
            failures.append(f"alert {name}: no test case where it does not fire")
    for name in sorted((fires | quiet) - alerts):
        failures.append(f"{tests_path}: tests alert {name}, which {rules_path} does not define")
    return failures, len(alerts)


# ------------------------------------------------------------------ self-test
SELF_TEST = [
    ('up{job=~"pushrelay-.*"} == 0', {"up"}),
    ('sum by (provider, le) (rate(pushrelay_end_to_end_seconds_bucket{le="5.0", provider=~"$provider"}[$__rate_interval]))',
     {"pushrelay_end_to_end_seconds_bucket"}),
    ('histogram_quantile(0.99, sum by (http_route, le) (rate(http_server_request_duration_bucket[5m])))',
     {"http_server_request_duration_bucket"}),
    ('sum without (instance) (rate(hb_requests{http_response_status_code=~"5.."}[${interval}])) / ignoring (x) group_left (y) hb_requests',
     {"hb_requests"}),
    ('a_total > bool 0.5 and on (job) b unless c offset 5m or d @ start()', {"a_total", "b", "c", "d"}),
    ('topk(10, sum by(tenant)(increase(pushrelay_tenant_requests_total[1h:5m])))', {"pushrelay_tenant_requests_total"}),
    ('absent(up{job="pushrelay-feedback"}) or vector(0) * 1e3 + 0x1F - Inf', {"up"}),
    ('{__name__="pushrelay_dead_letters_total", cause="expired"}', {"pushrelay_dead_letters_total"}),
    ('deriv(lag{group!~".*\\\\.retry"}[10m]) > 0  # a comment naming not_a_metric', {"lag"}),
    ('provider:pushrelay_end_to_end_slow:ratio_rate1h > (14.4 * 0.01)', {"provider:pushrelay_end_to_end_slow:ratio_rate1h"}),
    ('label_replace(m, "dst", "$1", "src", "(.*)")', {"m"}),
    ('some_future_function(x_total)', {"x_total"}),
]
SELF_TEST_VARIABLES = [
    ('label_values(up{job=~"pushrelay-.*"}, job)', {"up"}),
    ({"query": "label_values(pushrelay_send_attempts_total, provider)"}, {"pushrelay_send_attempts_total"}),
    ("label_values(job)", set()),
]


def self_test():
    failures = 0
    for expr, want in SELF_TEST:
        got = metric_names(expr)
        if got != want:
            failures += 1
            print(f"FAIL: {expr!r}: got {sorted(got)}, want {sorted(want)}")
    for query, want in SELF_TEST_VARIABLES:
        got = grafana_query_names(query)
        if got != want:
            failures += 1
            print(f"FAIL: variable {query!r}: got {sorted(got)}, want {sorted(want)}")
    # check_dashboard must reject a panel without a datasource or a query.
    import os
    import tempfile
    bad = {"templating": {"list": [{"name": "datasource", "type": "datasource"}]},
           "panels": [{"id": 1, "type": "timeseries", "title": "no datasource", "targets": [{"refId": "A", "expr": "up"}]},
                      {"id": 2, "type": "timeseries", "title": "no target", "datasource": {"uid": "x"}}]}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(bad, f)
    found = check_dashboard(f.name)
    os.unlink(f.name)
    if len(found) != 2:
        failures += 1
        print(f"FAIL: check_dashboard on a bad dashboard found {found}, want two failures")
    total = len(SELF_TEST) + len(SELF_TEST_VARIABLES) + 1
    print(f"extractor self-test: {total - failures}/{total} passed")
    return failures == 0


def main(argv):
    if argv[:1] == ["self-test"] and len(argv) == 1:
        return 0 if self_test() else 1
    if argv[:1] == ["check-dashboard"] and len(argv) == 2:
        failures = check_dashboard(argv[1])
        for f in failures:
            print("FAIL: " + f)
        if not failures:
            d = json.load(open(argv[1]))
            n = sum(1 for p in dashboard_panels(d) if p.get("type") != "row")
            print(f"{argv[1]}: {n} panels, each with a datasource and a query: ok")
        return 1 if failures else 0
    if argv[:1] == ["check-rules"] and len(argv) == 3:
        failures, count = check_rules(*argv[1:])
        for f in failures:
            print("FAIL: " + f)
        if not failures:
            print(f"{argv[1]}: {count} alerts, each with severity, annotations and firing and quiet tests: ok")
        return 1 if failures else 0
    if argv[:1] == ["check-names"] and len(argv) == 4:
        ok, count = check_names(*argv[1:])
        if ok:
            print(f"every metric queried by {count} rule and dashboard expressions is exported: ok")
        return 0 if ok else 1
    if argv[:1] == ["names"] and len(argv) == 2:
        print("\n".join(sorted(metric_names(argv[1]))))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
