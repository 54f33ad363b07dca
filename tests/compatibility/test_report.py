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


def _all_types_results():
    """The top-100 file above plus two types outside it, one compiled and one failing L3, from a ``--all``
    sweep whose release has four causal-LM types (two ranked, two not)."""
    results = _results()
    for name, l3 in (("zz_compiled", "pass"), ("zz_failing", "fail")):
        rec = R.new_record(_unranked_spec(name))
        R.set_level(rec, "L1", "pass")
        R.set_level(rec, "L2", "pass")
        if l3 == "pass":
            R.set_level(rec, "L3", "pass", details={"path": "compiled"})
            R.set_level(rec, "L4", "pass")
            R.set_level(rec, "L5", "skip", reason="no TP plan")
        else:
            R.set_level(rec, "L3", "fail", reason="greedy tokens differ from CPU eager", op="generate")
        R.upsert(results, rec)
    results["causal_lm_types"] = ["glm", "deepseek_v4", "zz_compiled", "zz_failing"]
    return results


def _unranked_spec(name):
    from hf_neuron.compat.archs import ArchSpec

    return ArchSpec(model_type=name)


def test_an_all_types_sweep_has_its_own_headline_beside_the_top_100(tmp_path):
    results = _all_types_results()
    counts = R.summarize_all_types(results)
    # glm and zz_compiled compiled; deepseek_v4 (rank 10) and zz_failing fail L3.
    assert (counts["types"], counts["compiled"], counts["percent"]) == (4, 2, 50.0)
    assert (counts["l1_l4"], counts["l5_pass"], counts["l5_tested"]) == (2, 1, 1)
    assert counts["failing"] == ["deepseek_v4", "zz_failing"]
    assert R.summarize(results)["headline"] == 87  # the top-100 headline is unchanged
    assert R.validate(results) == []
    path = tmp_path / "5.25.0-simulated.json"
    R.write_atomic(path, results)
    readme = tmp_path / "README.md"
    readme.write_text(f"{report.BEGIN}\n{report.END}\n")
    report.update_readme(readme, [path], charts=False)
    text = readme.read_text()
    assert "**2 of the 4 causal-LM `model_type`s (50.0%) run on Neuron, compiled**" in text
    assert "| 1 | L3: greedy tokens differ from CPU eager | `zz_failing` |" in text
    assert "| `zz_compiled` | ✓ | ✓ | ✓ | ✓ | – |" in text
    project = tmp_path / "PROJECT.md"
    project.write_text(f"{report.HEADLINE_BEGIN}\n{report.END}\n")
    report.update_headline(project, [path])
    assert "| 5.23.0, simulated Neuron device | 4 | 2 (50.0%) | 0 | 2 | 1 of 1 |" in project.read_text()
    # A file without the sweep's denominator has no all-types headline.
    del results["causal_lm_types"]
    assert R.summarize_all_types(results) is None
    assert R.validate({**results, "causal_lm_types": "all"}) == ["causal_lm_types must be a list of model_type names"]


def test_the_headline_counts_moe_types_whose_experts_are_sharded(tmp_path):
    results = _results()
    records = R.by_model_type(results)
    sharded = {"experts": 4, "local_experts": 2, "expert_weights_per_rank": 0.5, "ep_size": 2}
    # qwen3_moe: experts sharded, L5 passes; mixtral: L5 refused replicated experts; gpt_oss: L5 passed
    # before the experts were described (an older record): not counted as sharded.
    cases = {"qwen3_moe": ("pass", sharded), "mixtral": ("fail", {**sharded, "expert_weights_per_rank": 1.0}),
             "gpt_oss": ("pass", None)}
    for name, (status, experts) in cases.items():
        rec = records[name]
        rec["details"]["L1"] = {"routed_experts": 4}
        details = {"tp_size": 2, **({"experts": experts} if experts else {})}
        R.set_level(rec, "L5", status, details=details, reason=None if status == "pass" else "routed experts not sharded")
    summary = R.summarize(results)
    assert (summary["moe_sharded"], summary["moe_types"]) == (1, 3)
    path = tmp_path / "5.25.0-simulated.json"
    R.write_atomic(path, results)
    readme = tmp_path / "README.md"
    readme.write_text(f"{report.BEGIN}\n{report.END}\n{report.HEADLINE_BEGIN}\n{report.END}\n")
    report.update_readme(readme, [path], charts=False)
    report.update_headline(readme, [path])
    text = readme.read_text()
    assert "**MoE types with sharded experts: 1 of 3**" in text
    assert "| 88 of 89 | 1 of 3 |" in text
