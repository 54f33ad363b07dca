"""README table and coverage chart regenerated from a results file."""

from hf_neuron.compat import report
from hf_neuron.compat import results as R
from hf_neuron.compat.archs import load_ranking

from compat_helpers import run_compat


def _results():
    ranking = load_ranking()
    results = R.new_results("5.23.0", "2.13.0", "simulated")
    for spec in ranking:
        rec = R.new_record(spec)
        if spec.kind == "remote_code":
            for lv in R.LEVELS:
                R.set_level(rec, lv, "skip", reason="not testable here: needs remote code")
        elif spec.rank % 10 == 0:
            R.set_level(rec, "L1", "pass")
            R.set_level(rec, "L2", "pass")
            R.set_level(rec, "L3", "fail", reason="Unsupported: dynamic shape | data-dependent 7", op="aten::nonzero")
            for lv in ("L4", "L5"):
                R.set_level(rec, lv, "skip", reason="x")
        else:
            eager = spec.rank in (5, 15)
            for lv in R.LEVELS:
                details = {"path": "eager" if eager else "compiled"} if lv == "L3" else None
                if eager and lv == "L3":
                    details["eager_reason"] = "X sets _can_compile_fullgraph=False"
                R.set_level(rec, lv, "pass", details=details)
            rec["graphs_compiled"]["L3"] = 0 if eager else 3 if spec.rank == 1 else 2
        R.upsert(results, rec)
    results["l3_check"] = "the strict check"
    return results


def test_readme_block_is_regenerated_and_the_rest_kept(tmp_path):
    path = tmp_path / "r.json"
    R.write_atomic(path, _results())
    readme = tmp_path / "README.md"
    readme.write_text(f"# Hand-written\n\nintro\n\n{report.BEGIN}\nold table\n{report.END}\n\n## Footer\n")
    report.update_readme(readme, [path])
    text = readme.read_text()
    assert text.startswith("# Hand-written\n\nintro\n") and text.rstrip().endswith("## Footer")
    assert "old table" not in text
    assert "**87 of the top-100 text-generation architectures run on Neuron, compiled**" in text
    assert "2 more run uncompiled" in text
    assert "L3 in this file: the strict check." in text
    assert "| L3 | greedy generate" in text and "| 87 | 2 | 10 | 1 | 87 |" in text
    assert "| 5 | `qwen3_5` | A | ✓ | ✓ | ✓ eager | ✓ | ✓ | 0 |" in text
    assert "| `qwen3_5` | X sets _can_compile_fullgraph=False |" in text
    assert "`kimi_k2`" in text and "not testable" in text.lower()
    assert "`mistral3`" in text  # multimodal entries named
    # grouped failure reasons (numbers normalised, the pipe escaped), and the per-architecture row
    assert "| 10 | L3: Unsupported: dynamic shape \\| data-dependent N |" in text
    assert "| 10 | `deepseek_v4` | A | ✓ | ✓ | ✗ | – | – |" in text  # rank 10 fails L3, later levels not run
    assert "| 75 | `glm` | C | ✓ | ✓ | ✓ | ✓ | ✓ | 2 |" in text
    assert "`qwen3` (3)" in text  # more than 2 graphs is reported
    assert "optimum-neuron 0.4.5" in text and "8 of which are in this top-100" in text
    chart = tmp_path / "coverage-5.23.0-simulated.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](coverage-5.23.0-simulated.png)" in text
    assert "([`5.23.0-simulated.json`](r.json))" in text  # a link to the results file, relative to the README
    # regenerating is idempotent
    report.update_readme(readme, [path])
    assert readme.read_text() == text


def test_report_only_from_the_cli(tmp_path):
    path = tmp_path / "r.json"
    R.write_atomic(path, _results())
    readme = tmp_path / "README.md"
    assert run_compat("--report-only", "--output", path, "--readme", readme) == 0
    assert report.BEGIN in readme.read_text()


def test_project_readme_headline_puts_compiled_uncompiled_l4_and_l5_side_by_side(tmp_path):
    path = tmp_path / "5.24.0-simulated.json"
    R.write_atomic(path, _results())
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{report.HEADLINE_BEGIN}\nold\n{report.END}\nrest\n")
    assert report.update_headline(readme, [path])
    text = readme.read_text()
    assert "| 5.23.0, simulated Neuron device | 87 | 2 | 87 | 89 of 89 |" in text
    assert "89%" in text and "46%" in text and "old" not in text
    assert text.startswith("intro\n") and text.endswith("rest\n")
    plain = tmp_path / "OTHER.md"
    plain.write_text("no block here\n")
    assert not report.update_headline(plain, [path]) and plain.read_text() == "no block here\n"


def test_a_block_under_an_older_marker_is_found_and_gets_the_current_marker(tmp_path):
    # The results moved from compatibility/results/ into the package: pages keep their old marker
    # until they are regenerated, and must still be regenerated in place (not get a second block).
    path = tmp_path / "5.24.0-simulated.json"
    R.write_atomic(path, _results())
    readme = tmp_path / "README.md"
    old = ("<!-- BEGIN GENERATED compatibility headline, by `hf-neuron compat` from compatibility/results: "
           "do not edit by hand -->")
    readme.write_text(f"intro\n{old}\nold\n{report.END}\nrest\n")
    assert report.update_headline(readme, [path])
    text = readme.read_text()
    assert old not in text and text.count(report.HEADLINE_BEGIN) == 1 and text.count(report.END) == 1
    assert "old" not in text and text.startswith("intro\n") and text.endswith("rest\n")
