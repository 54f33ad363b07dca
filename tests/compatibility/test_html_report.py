"""``hf-neuron compat report --html DIR``: the page's content, read as HTML (no browser; the
browser test is test_html_report_browser.py)."""

from __future__ import annotations

import copy
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from hf_neuron.cli import main as cli_main
from hf_neuron.compat import html_report, report
from hf_neuron.compat import results as R
from hf_neuron.compat.diffusers.table import RESULT_FILES
from hf_neuron.compat.paths import COMMITTED_DIFFUSERS_RESULTS_DIR


class Page(HTMLParser):
    """What the tests read of the page: the rows of each table body, the text of each row's cells,
    every src/href, and the embedded data."""

    def __init__(self, text: str):
        super().__init__()
        self.bodies: dict[str, list[str]] = {}  # data-release -> model_types, in row order
        self.rows: dict[str, list[str]] = {}  # row key -> its cells' text
        self.row_attrs: dict[str, dict] = {}
        self.links: list[str] = []
        self.data_text = ""
        self._body = None
        self._release = None
        self._row = None
        self._in_data = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.links += [attrs[name] for name in ("src", "href") if attrs.get(name)]
        if tag == "tbody" and "data-release" in attrs:
            self._release = attrs["data-release"]
            self._body = self.bodies.setdefault(self._release, [])
        elif tag == "tr":
            key = next((f"{name}={attrs[name]}" for name in ("data-model-type", "data-headline", "data-diffusers")
                        if name in attrs), None)
            if key and key.startswith("data-model-type="):
                self._body.append(attrs["data-model-type"])
                key = f"{key}@{self._release}"
            self._row = key
            if key:
                self.rows[key], self.row_attrs[key] = [], attrs
        elif tag in ("td", "th") and self._row:
            self.rows[self._row].append("")
        elif tag == "script" and attrs.get("id") == "compat-data":
            assert attrs.get("type") == "application/json"
            self._in_data = True

    def handle_endtag(self, tag):
        if tag == "tr":
            self._row = None
        elif tag == "script":
            self._in_data = False

    def handle_data(self, data):
        if self._in_data:
            self.data_text += data
        elif self._row and self.rows[self._row]:
            self.rows[self._row][-1] += data

    def cells(self, key: str) -> list[str]:
        return [" ".join(c.split()) for c in self.rows[key]]


@pytest.fixture(scope="module")
def committed_site(tmp_path_factory):
    index = html_report.write_site(tmp_path_factory.mktemp("site"))
    return index, Page(index.read_text(encoding="utf-8"))


def _small_results(tmp_path: Path, name="sweep.json", count=5) -> Path:
    """The newest committed results file cut to ``count`` ranked architectures, plus one outside the
    top-100 (rank null, as a ``--all`` sweep records it) that fails L3."""
    results = R.load(report.results_files()[0])
    archs = results["architectures"][:count]
    outside = copy.deepcopy(archs[0])
    outside.update(model_type="zz_outside", rank=None, tier=None)
    R.set_level(outside, "L3", "fail", reason="Unsupported: </script><!-- a reason quoting markup", op="aten::nonzero")
    results["architectures"] = archs + [outside]
    path = tmp_path / name
    R.write_atomic(path, results)
    return path


def test_every_architecture_of_every_release_is_a_row_newest_release_first(committed_site):
    index, page = committed_site
    files = report.results_files()
    assert len(page.bodies) == len(files) > 0
    for i, path in enumerate(files):  # the committed files' order is newest first
        assert page.bodies[str(i)] == [r["model_type"] for r in R.load(path)["architectures"]], path.name
    data = json.loads(page.data_text)
    assert [r["file"] for r in data["releases"]] == [p.name for p in files]
    assert [len(r["architectures"]) for r in data["releases"]] == [len(page.bodies[str(i)]) for i in range(len(files))]


def test_the_headline_has_the_numbers_of_summarize(committed_site):
    _, page = committed_site
    for i, path in enumerate(report.results_files()):
        results = R.load(path)
        s = R.summarize(results)
        l5 = s["per_level"]["L5"]
        cells = page.cells(f"data-headline={i}")
        assert cells[0].startswith(f"{results['transformers_version']}, ")
        assert cells[1:] == [str(s["headline"]), str(s["runs_uncompiled"]), str(s["cumulative"]["L4"]),
                             f"{l5['pass']} of {l5['pass'] + l5['fail']}",
                             f"{s['moe_sharded']} of {s['moe_types']}" if s["moe_types"] else "not recorded"], path.name


def test_a_row_shows_levels_graphs_path_failure_and_fixes(committed_site):
    from hf_neuron.transformers.fix_scope import model_fixes

    _, page = committed_site
    records = R.load(report.results_files()[0])["architectures"]
    with_fixes = next((r for r in records if model_fixes(r["model_type"])), None)
    if with_fixes is not None:
        cells = page.cells(f"data-model-type={with_fixes['model_type']}@0")
        assert cells[0] == str(with_fixes["rank"]) and cells[1] == with_fixes["model_type"]
        assert all(f.name in cells[-1] for f in model_fixes(with_fixes["model_type"]))
    failing = next((r for r in records if r["failure"]), None)
    if failing is not None:
        cells = page.cells(f"data-model-type={failing['model_type']}@0")
        reason = cells[-2]
        assert reason.startswith(f"{failing['failure']['level']}: ")
        assert " ".join(failing["failure"]["reason"].split()) in reason  # in full, not trimmed
        # the mark, then its words for a screen reader
        assert f"✗{failing['failure']['level']} fail" in cells


def test_the_page_fetches_nothing(committed_site):
    index, page = committed_site
    assert page.links == []  # no stylesheet, script, font or image from anywhere: it works from file://
    text = index.read_text(encoding="utf-8")
    assert "<link" not in text and "<script src" not in text and "@import" not in text and "url(" not in text
    assert 'id="search"' in text and 'id="filter"' in text and 'id="shown-count"' in text
    assert text.count('<label>') >= 3  # every control is named for a screen reader


def test_the_diffusers_classes_and_pipelines_are_a_second_table(committed_site):
    _, page = committed_site
    compiled = json.loads((COMMITTED_DIFFUSERS_RESULTS_DIR / RESULT_FILES["compile"]).read_text())["results"]
    pipelines = json.loads((COMMITTED_DIFFUSERS_RESULTS_DIR / RESULT_FILES["pipelines"]).read_text())["results"]
    for record in compiled:
        cells = page.cells(f"data-diffusers={record['class']}")
        assert cells[1] == "class"
        assert cells[6].startswith("pass") == bool(record["ok"]), cells
    for record in pipelines:
        cells = page.cells(f"data-diffusers={record['family']}")
        assert cells[1] == "pipeline" and record["transformer"] in cells[0]


def test_custom_results_from_the_cli_with_an_architecture_outside_the_top_100(tmp_path, capsys):
    results = _small_results(tmp_path)
    site = tmp_path / "site"
    assert cli_main(["compat", "report", "--html", str(site), "--results", str(results)]) == 0
    index = site / "index.html"
    assert capsys.readouterr().out.strip() == str(index)
    text = index.read_text(encoding="utf-8")
    page = Page(text)
    expected = [r["model_type"] for r in R.load(results)["architectures"]]
    assert list(page.bodies) == ["0"] and page.bodies["0"] == expected
    outside = page.cells("data-model-type=zz_outside@0")
    assert outside[0] == "outside top-100" and page.row_attrs["data-model-type=zz_outside@0"]["class"] == "unranked"
    # A reason quoting markup neither ends the embedded data nor becomes markup.
    assert "</script><!--" not in text
    data = json.loads(page.data_text)
    assert data["releases"][0]["architectures"][-1]["reason"].startswith("Unsupported: </script><!--")
    assert outside[-2].startswith("L3: Unsupported: </script><!--")


def test_several_results_files_are_releases_newest_first(tmp_path):
    older = R.load(_small_results(tmp_path, "a.json"))
    older["transformers_version"] = "5.1.0"
    R.write_atomic(tmp_path / "a.json", older)
    newer = _small_results(tmp_path, "b.json", count=3)
    page = Page(html_report.write_site(tmp_path / "site", files=[tmp_path / "a.json", newer]).read_text())
    data = json.loads(page.data_text)
    assert [r["file"] for r in data["releases"]] == ["b.json", "a.json"]
    assert [len(page.bodies[k]) for k in ("0", "1")] == [4, 6]


def test_no_diffusers_results_is_said(tmp_path):
    index = html_report.write_site(tmp_path / "site", files=[_small_results(tmp_path)],
                                   diffusers_dir=tmp_path / "nothing")
    assert "No diffusers results recorded" in index.read_text()


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("make_argv", "message"),
    [
        (lambda tmp: ["--results", str(tmp / "missing.json")], "--results"),
        (lambda tmp: ["--results", str(_write(tmp / "x.json", "not json"))], "not JSON"),
        (lambda tmp: ["--results", str(_write(tmp / "x.json", '{"architectures": [1]}'))],
         "is not a compatibility results file"),
        (lambda tmp: ["--results", str(tmp)], "a folder, not a file"),
    ],
    ids=["missing", "not-json", "not-a-results-file", "a-folder"],
)
def test_a_bad_results_file_is_one_line_and_writes_nothing(tmp_path, capsys, make_argv, message):
    site = tmp_path / "site"
    assert cli_main(["compat", "report", "--html", str(site), *make_argv(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("hf-neuron compat report: error: ") and message in err
    assert "give --results a results file" in err or "give a results file" in err  # what to pass instead
    assert not site.exists()


def test_html_naming_a_file_is_refused(tmp_path, capsys):
    target = _write(tmp_path / "index.html", "mine")
    assert cli_main(["compat", "report", "--html", str(target)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is a file; give a folder" in err
    assert target.read_text() == "mine"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compat", "report"], "give --html DIR"),
        (["compat", "--quick", "report", "--html", "x"], "--quick given before 'report'"),
    ],
)
def test_missing_or_misplaced_options_are_explained(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err
    assert not (tmp_path / "x").exists()
