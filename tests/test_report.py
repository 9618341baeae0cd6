"""Reports from the hand-written fixture CSV: Rej checked by hand, paper values, errors, figures.

Fixture tests/fixtures/results_small.csv, pair qwen3_14b, m = 20, GSM8K (counts chosen so the
arithmetic is easy to check by hand):
  SpS            rejected 3000 / generated 1000 -> r = 3.0 (the reference)
  TAS            2000 / 1000 -> r = 2.0 -> Rej = 100 (2.0 / 3.0 - 1) = -33.3 %
  Cactus δ=0.75  1500 / 1000 -> r = 1.5 -> Rej = -50.0 %; score 93.00 vs paper 92.15 -> +0.85 pp
  Cactus δ=1.0   two seeds: (1200 + 1400) / (1000 + 1000) = 1.3 -> Rej = -56.7 %,
                 score (92 + 93) / 2 = 92.50, AL (7.0 + 7.2) / 2 = 7.10
  Cactus δ=2.0   status error: must not appear.
"""

import json
import re
from pathlib import Path

import pandas as pd
import PIL.Image
import pytest

from cactus_bench.report import (
    aggregate,
    blocks,
    load_reference,
    load_results,
    make_figures,
    table1,
    to_latex,
    to_markdown,
    write_tables,
)
from cactus_bench.report.__main__ import main
from cactus_bench.report.error_bars import DRIFT_NOTE
from cactus_bench.report.plots import DELTA_FIGURES, FIGURES, OPTIONAL_FIGURES
from cactus_bench.report.reference import model_key
from cactus_bench.store import COLUMNS

FIXTURE = str(Path(__file__).parent / "fixtures" / "results_small.csv")


@pytest.fixture(scope="module")
def agg():
    return aggregate(load_results([FIXTURE]))


def _row(markdown: str, label: str) -> list[str]:
    """Cells of the first table row whose label is `label`."""
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == label:
            return cells[1:]
    raise AssertionError(f"no row {label!r} in\n{markdown}")


def _lines_after(markdown: str, label: str, count: int) -> list[list[str]]:
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {label} |"))
    return [
        [c.strip() for c in line.strip("|").split("|")][1:]
        for line in lines[start + 1 : start + 1 + count]
    ]


def test_table1_rej_matches_the_hand_computed_values(agg):
    markdown = to_markdown(table1(agg, load_reference())[0])
    # columns: GSM8K score, AL, Rej, GPQA score, AL, Rej
    assert _row(markdown, "SpS")[:3] == ["91.89", "5.11", "ref"]
    assert _row(markdown, "TAS (ε = 0.09)")[2] == "-33.3%"
    assert _row(markdown, "Cactus (δ = 0.75)")[:3] == ["93.00", "7.00", "-50.0%"]
    assert _row(markdown, "Cactus (δ = 1)")[:3] == ["92.50", "7.10", "-56.7%"]
    assert _row(markdown, "Cactus (δ = 1)")[3:] == ["—", "—", "—"]  # not run on GPQA
    assert _row(markdown, "Verifier")[1:3] == ["—", "—"]  # no drafts: no AL, no Rej
    assert "δ = 2" not in markdown  # the error row is dropped
    assert "Rej = 100 x (r / r_SpS - 1)" in markdown  # the formula is stated


def test_table1_shows_paper_values_and_our_difference(agg):
    markdown = to_markdown(table1(agg, load_reference())[0])
    paper, diff = _lines_after(markdown, "Cactus (δ = 0.75)", 2)
    assert paper[:3] == ["*92.15*", "*7.15*", "*-36%*"]
    assert diff[:3] == ["*+0.85 pp*", "*-0.15*", "*-14.0 pp*"]
    assert "arXiv:2604.04987" in markdown
    without = to_markdown(table1(agg, None)[0])
    assert "paper" not in without.split("\n1.")[0]


def test_latex_is_escaped_and_grouped(agg):
    latex = to_latex(table1(agg, load_reference())[0])
    assert r"\multicolumn{3}{c}{GSM8K}" in latex and r"\toprule" in latex
    assert r"qwen3\_14b" in latex and r"Cactus ($\delta$ = 0.75)" in latex
    assert r"-50.0\%" in latex and latex.rstrip().endswith(r"\end{table}")


def test_speedup_table_names_the_device(tmp_path, agg):
    written = write_tables(agg, load_reference(), tmp_path)
    assert sorted(p.name for p in written) == [
        "speedup.md",
        "speedup.tex",
        "table1.md",
        "table1.tex",
    ]
    speedup = (tmp_path / "speedup.md").read_text()
    assert "Device: NVIDIA A100-SXM4-40GB" in speedup
    assert re.search(
        r"\| GSM8K \| Cactus \(δ = 1\) \| 40.00 \| 20.00 \| 2.00x \| 1.95x \|", speedup
    )


def test_verifier_rows_join_only_their_own_pair(agg):
    found = {(pair, m): set(rows["sampler"]) for pair, m, rows in blocks(agg)}
    assert found == {
        ("qwen3_14b", 20): {"verifier", "sps", "tas", "cactus"},
        ("tiny", 4): {"verifier", "sps"},
    }


def test_reference_file_parses_and_every_number_cites_a_source():
    reference = load_reference()
    assert len(reference) == 27
    value = reference.lookup("Qwen/Qwen3-0.6B", "Qwen/Qwen3-14B", 20, "cactus", 1.0, "gpqa", "al")
    assert value.value == 6.74 and "Table 1" in reference.sources[value.source]["cite"]
    # the verifier row depends on neither drafter nor m
    assert (
        reference.lookup(None, "qwen3-14b", 10, "verifier", None, "gsm8k", "score").value == 91.71
    )
    assert reference.lookup(
        "Qwen/Qwen3-0.6B", "Qwen/Qwen3-14B", 10, "cactus", 1.0, "gpqa", "speedup_walltime"
    ).approximate
    assert model_key("/ckpt/Qwen3-0.6B/") == "qwen3-0.6b"


def test_paper_rej_agrees_with_the_al_form_of_the_formula():
    """PAPER.md: Rej is consistent with comparing (m - AL) / (AL + 1) against SpS's value."""
    reference = load_reference()
    m = 20
    checked = 0
    for task in ("gsm8k", "gpqa"):

        def paper(sampler, delta, metric, task=task):
            return reference.lookup(
                "Qwen/Qwen3-0.6B", "Qwen/Qwen3-14B", m, sampler, delta, task, metric
            )

        sps_al = paper("sps", None, "al").value
        for sampler, delta in (("tas", None), ("cactus", 0.75), ("cactus", 1.0)):
            al = paper(sampler, delta, "al").value
            implied = 100 * (((m - al) / (al + 1)) / ((m - sps_al) / (sps_al + 1)) - 1)
            assert implied == pytest.approx(paper(sampler, delta, "rej_pct").value, abs=2.5)
            checked += 1
    assert checked == 6


def test_bad_reference_files_are_refused(tmp_path):
    bad = tmp_path / "ref.yaml"
    bad.write_text(
        "sources: {a: {cite: x}}\nentries:\n  - {drafter: d, verifier: v, m: 1, "
        "sampler: sps, delta: null, task: t, metric: score, value: 1, source: b}\n"
    )
    with pytest.raises(ValueError, match="unknown source 'b'"):
        load_reference(bad)
    with pytest.raises(ValueError, match="not found"):
        load_reference(tmp_path / "missing.yaml")


def test_missing_column_and_empty_csv_give_clear_errors(tmp_path):
    broken = tmp_path / "no_al.csv"
    pd.read_csv(FIXTURE, dtype=str).drop(columns=["al"]).to_csv(broken, index=False)
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['al'\]"):
        load_results([broken])
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match="is empty"):
        load_results([empty])
    header_only = tmp_path / "header.csv"
    header_only.write_text(",".join(COLUMNS) + "\n")
    with pytest.raises(ValueError, match="header but no rows"):
        load_results([header_only])
    with pytest.raises(ValueError, match="no results CSV matched"):
        load_results([str(tmp_path / "nothing" / "*.csv")])


def test_rows_of_another_drafter_or_dtype_are_not_averaged_as_seeds(tmp_path):
    """Same settings and seed but another config hash (e.g. a recalibrated drafter appended to
    an old CSV) is refused; the same hash twice (a forced rerun) is a repeat."""
    frame = pd.read_csv(FIXTURE, dtype=str)
    sps = frame[frame["sampler"] == "sps"]
    rerun = tmp_path / "rerun.csv"
    pd.concat([frame, sps]).to_csv(rerun, index=False)
    again = aggregate(load_results([rerun]))
    assert (again.loc[again["sampler"] == "sps", "n_runs"] == 2).all()
    other = tmp_path / "other.csv"
    pd.concat([frame, sps.assign(config_hash="h99")]).to_csv(other, index=False)
    with pytest.raises(ValueError, match=r"share sampler, settings and seed but not their config"):
        aggregate(load_results([other]))


def test_cli_reports_bad_input_in_one_line(tmp_path, capsys):
    (tmp_path / "empty.csv").write_text("")
    assert main(["tables", "--csv", str(tmp_path / "empty.csv"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "is empty" in err and "\n" not in err


def test_a_missing_combination_gives_a_figure_that_says_so(agg):
    pair, m, rows = [b for b in blocks(agg) if b[0] == "tiny"][0]
    figure = FIGURES["al_vs_delta"](rows, pair, m)
    texts = [t.get_text() for ax in figure.axes for t in ax.texts]
    assert any("No Cactus δ sweep" in t for t in texts)
    assert "tiny" in figure.get_suptitle() and "CPU" in figure.get_label()  # machine: metadata


def test_a_task_with_only_verifier_rows_gets_no_panel(agg):
    """The verifier joins every m of its pair: a task swept at another m alone must not leave
    an empty panel in this block's figures."""
    pair, m, rows = [b for b in blocks(agg) if b[0] == "qwen3_14b"][0]
    only_verifier = rows[rows["sampler"] == "verifier"].assign(task="ifeval")
    with_extra_task = pd.concat([rows, only_verifier])
    assert "ifeval" not in set(rows["task"])
    for kind, build in FIGURES.items():
        titles = [ax.get_title() for ax in build(with_extra_task, pair, m).axes]
        assert "IFEval" not in titles, (kind, titles)
        assert titles == [ax.get_title() for ax in build(rows, pair, m).axes], kind
    # a block with nothing to compare keeps its panel, which says what is missing
    no_speculation = FIGURES["score_vs_al"](only_verifier, pair, m)
    notes = [t.get_text() for ax in no_speculation.axes for t in ax.texts]
    assert any("No speculative rows" in note for note in notes), notes


def test_figures_have_labelled_axes_and_are_written(tmp_path, agg):
    pair, m, rows = [b for b in blocks(agg) if b[0] == "qwen3_14b"][0]
    for kind, build in FIGURES.items():
        figure = build(rows, pair, m)
        title = figure.get_suptitle()
        assert title.startswith(f"{title.split(':')[0]}: qwen3_14b, m = 20"), title  # short
        assert "NVIDIA A100" in figure.get_label() and "→" in figure.get_label()
        for ax in figure.axes:
            if ax.lines or ax.collections:  # a panel with data, not a "missing" note
                assert ax.get_xlabel() and ax.get_ylabel(), kind
                assert ax.get_legend() is None, kind  # no legend inside a panel, over its data
        assert len(figure.legends) == 1, kind  # one for the figure, outside every panel
        figure.draw_without_rendering()
        legend = figure.legends[0].get_window_extent()
        for ax in figure.axes:
            assert not legend.overlaps(ax.get_window_extent()), kind
        texts = [t.get_text() for t in figure.legends[0].get_texts()]
        assert len(texts) == len(set(texts)), kind  # the panels' shared entries appear once
    written = make_figures(agg, tmp_path, formats=("png",))
    with PIL.Image.open(written[0]) as image:  # the machine travels in the file's metadata
        assert "NVIDIA A100" in image.info["Description"] and "Software" not in image.info
    # the tiny block has no δ sweep (SpS and the verifier only): its δ figures are not drawn;
    # the fixture's rows predate λ, so neither block gets the length figure
    assert len(written) == 2 * len(FIGURES) - len(DELTA_FIGURES) - 2 * len(OPTIONAL_FIGURES)
    assert not [p for p in written if "tiny" in p.name and "_vs_delta" in p.name]
    assert all(p.stat().st_size > 10_000 for p in written)


@pytest.mark.slow
def test_cli_all_writes_tables_and_figures(tmp_path):
    assert main(["all", "--csv", FIXTURE, "--out", str(tmp_path)]) == 0
    assert (tmp_path / "tables" / "table1.tex").exists()
    expected = 2 * len(FIGURES) - len(DELTA_FIGURES) - 2 * len(OPTIONAL_FIGURES)  # no λ rows
    assert len(list((tmp_path / "figures").glob("*.pdf"))) == expected


def _run_notebook(monkeypatch, results: str | None) -> list:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    if results is None:
        monkeypatch.delenv("CACTUS_RESULTS", raising=False)  # the committed results/demo
    else:
        monkeypatch.setenv("CACTUS_RESULTS", results)
    notebook = nbformat.read("notebooks/analysis.ipynb", as_version=4)
    nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": "notebooks"}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    return outputs


def _shown(outputs, kind: str) -> str:
    return "".join(str(o.get("data", {}).get(kind, "")) for o in outputs) + "".join(
        o.get("text", "") for o in outputs if o.output_type == "stream"
    )


@pytest.mark.slow
def test_notebook_shows_the_main_block_the_frontier_and_per_prompt_scores(monkeypatch):
    outputs = _run_notebook(monkeypatch, None)
    text = _shown(outputs, "text/plain")
    assert "main block: smollm2_135m, m = 2, 16 arms" in text  # the δ sweep, not m = 1
    assert "frontier: results/frontier/smollm2_135m.csv" in text
    markdown = _shown(outputs, "text/markdown")
    assert "Cactus-exact (δ = 2)" in markdown and "speedup (tokens/s)" in markdown
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 3  # 2 block + frontier
    html = _shown(outputs, "text/html")
    assert "Demo: Cactus (δ = 1)" in html and ">14<" in html  # prompts 0..14 of the demo


@pytest.mark.slow
def test_notebook_runs_headless_on_other_csvs(monkeypatch):
    outputs = _run_notebook(monkeypatch, FIXTURE)
    shown = _shown(outputs, "text/markdown")
    assert "Cactus (δ = 0.75)" in shown and "-50.0%" in shown
    assert any("image/png" in o.get("data", {}) for o in outputs)


def test_the_committed_notebook_carries_its_outputs():
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read("notebooks/analysis.ipynb", as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.outputs for cell in code), "run the notebook and save it with its outputs"
    assert "/work/" not in json.dumps([cell.outputs for cell in code])  # no machine paths


def test_rows_written_by_the_store_feed_the_report(tmp_path):
    """results -> report round trip: what ResultStore writes is what the report reads."""
    from cactus_bench.store import ResultStore, config_hash, run_metadata, summarise

    def records(accepted: list[int], m: int = 4) -> list[dict]:
        return [
            {
                "num_draft_tokens": m,
                "drafted_per_step": [m] * len(accepted),
                "accepted_per_step": accepted,
                "emitted_per_step": [a + 1 for a in accepted],
                "output_ids": list(range(sum(accepted) + len(accepted))),
                "draft_time_s": 0.1,
                "verify_time_s": 0.2,
                "sampler_time_s": 0.01,
                "total_time_s": 0.5,
            }
        ]

    store = ResultStore(tmp_path / "demo.csv")
    for sampler, delta, accepted in (("sps", None, [1, 0, 2, 1]), ("cactus", 0.5, [3, 2, 4, 3])):
        config = {"pair": "tiny", "sampler": sampler, "delta": delta, "m": 4}
        store.append(
            {
                "run_id": sampler,
                "config_hash": config_hash(config),
                "model_pair": "tiny",
                "drafter_id": "tiny-drafter",
                "verifier_id": "tiny-verifier",
                "task": "demo",
                "sampler": sampler,
                "delta": delta,
                "m": 4,
                "temperature": 0.6,
                "top_p": 0.95,
                "top_k": 20,
                "seed": 0,
                "score_name": "acc",
                "score": 0.5,
                "status": "ok",
                "baseline_mode": "none",
                **run_metadata("cpu"),
                **summarise(records(accepted)),
            }
        )
    markdown = to_markdown(table1(aggregate(load_results([store.csv_path])), None)[0])
    # SpS rejects 16 - 4 = 12 of 8 generated tokens (r = 1.5); Cactus 16 - 12 = 4 of 16 (0.25)
    assert _row(markdown, "Cactus (δ = 0.5)") == ["50.00", "3.00", "-83.3%"]
    assert _row(markdown, "SpS") == ["50.00", "1.00", "ref"]


def test_score_error_bars_are_the_binomial_standard_error():
    from cactus_bench.report.error_bars import score_stderr

    rows = pd.DataFrame({"score": [0.5, 0.9], "n_prompts": [100, 400]})
    assert score_stderr(rows, 100.0) == pytest.approx([5.0, 1.5])  # 100 sqrt(p (1 - p) / n)
    assert score_stderr(rows.drop(columns="n_prompts"), 100.0) is None


def test_score_vs_al_flat_scores_and_crowded_labels_stay_readable(agg):
    """All-zero scores (a 135M verifier on GSM8K) get a +-5 point axis, not one zoomed into
    float noise; δ labels of points that share a score do not print over each other."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    pair, m, rows = [b for b in blocks(agg) if b[0] == "qwen3_14b"][0]
    rows = rows.copy()
    rows["score"] = rows["score"].where(rows["score"].isna(), 0.0)
    sweep = rows[rows["sampler"] == "cactus"].iloc[0]
    crowded = pd.DataFrame([sweep] * 4)  # four δ points at nearly the same AL and score
    crowded["delta"] = [0.25, 0.5, 1.0, 2.0]
    crowded["al"] = float(sweep["al"]) + pd.Series([0.0, 0.01, 0.02, 0.03]).to_numpy()
    rows = pd.concat([rows[rows["sampler"] != "cactus"], crowded], ignore_index=True)
    figure = FIGURES["score_vs_al"](rows, pair, m)
    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw(renderer)
    ax = [a for a in figure.axes if a.collections][0]
    low, high = ax.get_ylim()
    assert (low, high) == pytest.approx((-5.0, 5.0))
    assert not ax.yaxis.get_major_formatter().get_offset()
    # the text's own box (an Annotation's extent would include its leader line)
    boxes = [Text.get_window_extent(t, renderer) for t in ax.texts if t.get_text()[:2] == "δ="]
    assert len(boxes) == 4
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert Bbox.intersection(a, b) is None or Bbox.intersection(a, b).width < 1, (a, b)


def test_speedup_vs_m_draws_each_method_across_m(tmp_path, agg):
    """A pair swept over m gets one speedup-vs-m figure per task (one line per method, bars from
    the intervals); a method run at a single m draws no line; an unswept pair gets none."""
    from cactus_bench.report.draft_length import m_sweeps, versus_m

    assert not list(m_sweeps(agg))  # the fixture has one m per pair
    pair, m, rows = [b for b in blocks(agg) if b[0] == "qwen3_14b"][0]
    cactus = rows[(rows["sampler"] == "cactus") & (rows["task"] == "gsm8k")].head(1)
    wider = cactus.assign(m=m + 4, speedup_tokens=cactus["speedup_tokens"] * 1.2)
    swept = pd.concat([agg, wider], ignore_index=True)
    [(found_pair, task, found)] = list(m_sweeps(swept))
    assert (found_pair, task, sorted(found["m"].unique())) == ("qwen3_14b", "gsm8k", [m, m + 4])
    figure = versus_m(found, found_pair, task)
    speedup_ax = figure.axes[0]
    labelled = [t for t in speedup_ax.get_legend_handles_labels()[1] if "Cactus" in t]
    assert len(labelled) == 1  # only the method with two values of m
    assert [t.get_text() for t in figure.legends[0].get_texts()].count(labelled[0]) == 1
    assert speedup_ax.get_xlabel().startswith("m ")
    written = make_figures(swept, tmp_path, formats=("png",))
    assert [p.name for p in written if p.name.startswith("speedup_vs_m")] == [
        "speedup_vs_m__qwen3-14b__gsm8k.png"
    ]


def test_every_figure_names_its_machine_and_crosses_drifted_timings(agg):
    """The title's second line names the machine (the CPU kind changes between sessions); a
    timing figure counts the drift_marked rows and crosses their points, a figure of AL or
    score (no timing in it) does neither."""
    pair, m, rows = [b for b in blocks(agg) if b[0] == "qwen3_14b"][0]
    for kind, build in FIGURES.items():
        machine = build(rows, pair, m).get_suptitle().split("\n", 1)[1]
        verb = "timed" if kind.startswith("speedup") else "decoded"
        assert machine.startswith(f"{verb} on ") and "NVIDIA A100" in machine, (kind, machine)
        assert "drift_marked" not in machine, kind  # no row of the fixture drifted
    drifted = rows.assign(drift_marked=(rows["sampler"] == "cactus") & (rows["task"] == "gsm8k"))
    figure = FIGURES["speedup_vs_delta"](drifted, pair, m)
    assert f"2 of {len(rows)} rows drift_marked" in figure.get_suptitle().replace("\n", " ")
    crosses = [c for ax in figure.axes for c in ax.collections if c.get_label() == DRIFT_NOTE]
    assert [len(c.get_offsets()) for c in crosses] == [2]  # GSM8K's two δ, not GPQA's
    assert DRIFT_NOTE in [t.get_text() for t in figure.legends[0].get_texts()]
    untimed = FIGURES["al_vs_delta"](drifted, pair, m)
    assert "drift_marked" not in untimed.get_suptitle()
    assert not [c for ax in untimed.axes for c in ax.collections if c.get_label() == DRIFT_NOTE]
