"""requests.csv, scenarios.csv and report.html as a user opens them: the CSV read back equals the
run's records and summaries; the HTML parses, shows every scenario, embeds its charts as PNG data
and references nothing outside itself."""

import base64
import csv
from html.parser import HTMLParser

from servingctl.loadgen.outputs import write_all
from servingctl.loadgen.outputs.tables import REPORT_HTML, REQUESTS_CSV, SCENARIOS_CSV


class Page(HTMLParser):
    """Table cells, image sources and every link or source attribute of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[str] = []
        self.images: list[str] = []
        self.references: list[str] = []
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag in ("td", "th"):
            self._in_cell = True
            self.cells.append("")
        if tag == "img":
            self.images.append(attributes["src"])
        self.references += [v for k, v in attributes.items() if k in ("src", "href") and v]

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._in_cell = False

    def handle_data(self, data):
        if self._in_cell:
            self.cells[-1] += data


def test_csv_rows_equal_the_records_and_summaries(run, tmp_path):
    written = write_all(run, tmp_path)
    assert {tmp_path / REQUESTS_CSV, tmp_path / SCENARIOS_CSV, tmp_path / REPORT_HTML} <= set(written)
    with (tmp_path / REQUESTS_CSV).open() as f:
        requests = list(csv.DictReader(f))
    records = [(s.summary.name, r) for s in run.scenarios for r in s.records]
    assert len(requests) == len(records)
    for row, (name, record) in zip(requests, records, strict=True):
        assert row["scenario"] == name and int(row["index"]) == record.index
        assert row["ok"] == str(record.ok) and row["completion_tokens"] == str(record.completion_tokens or "")
        assert (float(row["ttft_ms"]) if row["ttft_ms"] else None) == record.ttft_ms
    failed = [row for row in requests if row["ok"] == "False"]
    assert len(failed) == 1 and failed[0]["error_kind"]  # the fixture's one failed request, with its reason
    with (tmp_path / SCENARIOS_CSV).open() as f:
        scenarios = list(csv.DictReader(f))
    assert [row["scenario"] for row in scenarios] == [s.summary.name for s in run.scenarios]
    for row, scenario in zip(scenarios, run.scenarios, strict=True):
        s = scenario.summary
        assert int(row["ok"]) == s.ok and int(row["failed"]) == s.failed
        assert float(row["ttft_ms_median"]) == s.ttft_ms.median and float(row["e2e_ms_p99"]) == s.e2e_ms.p99


def test_html_report_is_self_contained_with_every_scenario_and_its_charts(run, tmp_path):
    write_all(run, tmp_path)
    page = Page()
    page.feed((tmp_path / REPORT_HTML).read_text())
    for scenario in run.scenarios:
        assert scenario.summary.name in page.cells
    assert "mtp-on" in (tmp_path / REPORT_HTML).read_text()
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert len(page.images) == len(pngs) >= 2
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert all(ref.startswith("data:") for ref in page.references)  # nothing fetched: readable offline


def test_html_report_of_a_comparison_holds_each_figures_change_its_interval_and_both_fingerprints(run, baseline, tmp_path):
    from servingctl.loadgen.outputs.rows import compare_runs

    write_all(run, tmp_path, baseline=baseline)
    text = (tmp_path / REPORT_HTML).read_text()
    page = Page()
    page.feed(text)
    assert f"Comparison with {baseline.metadata.run_id}" in text
    compared = {sc.name: sc for sc in compare_runs(baseline, run)}
    for label in ("output tok/s", "decode tok/s", "TTFT ms"):
        figure = next(f for f in compared["in256-c1"].figures if f.label == label)
        # The same figure in the page: both medians, the change, the interval (or '-' when too few), the verdict.
        at = page.cells.index(label, page.cells.index("in256-c1"))
        row = page.cells[at + 1 : at + 8]
        shown = [figure.baseline, figure.run, figure.change_pct, figure.low_pct, figure.high_pct]
        assert row[:5] == ["-" if v is None else f"{v:,.2f}" for v in shown] and row[5] == figure.verdict
    assert figure.change_pct is not None and figure.change_pct > 0  # TTFT 100 against 90 ms
    last = len(page.cells) - 1 - page.cells[::-1].index("in2048-c2")  # its comparison row, after the scenarios table
    assert page.cells[last + 1] == "only in this run"
    # Both fingerprints side by side, each field saying whether the runs differ on it.
    from servingctl.loadgen.outputs.fingerprint import compare_fingerprints

    prints = compare_fingerprints(baseline, run)
    at = page.cells.index("differs") + 1
    assert page.cells[at : at + 4 * len(prints)] == [c for r in prints for c in (r.field, r.baseline, r.run, str(r.differs))]
    assert len(page.images) == len(sorted(tmp_path.glob("*.png"))) and any("compare" in p.name for p in tmp_path.glob("*.png"))
