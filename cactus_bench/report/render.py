"""Render a `Table` to Markdown (GitHub) and LaTeX (booktabs)."""

from __future__ import annotations

from cactus_bench.report.tables import Table

_LATEX_SYMBOLS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"$\sim$",
    "^": r"\^{}",
    "δ": r"$\delta$",
    "ε": r"$\epsilon$",
    "α": r"$\alpha$",
    "→": r"$\to$",
    "↳": r"$\hookrightarrow$",
    "−": "$-$",
    "—": "--",
    "†": r"\textsuperscript{\dag}",
    "‡": r"\textsuperscript{\ddag}",
}


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def to_markdown(table: Table) -> str:
    header = list(table.columns)
    if table.groups and any(title for title, _ in table.groups):
        # Markdown has no spanning headers: prefix each column with its group ("GSM8K Score").
        header = []
        position = 0
        for title, span in table.groups:
            for column in table.columns[position : position + span]:
                header.append(f"{title} {column}".strip())
            position += span
    lines = [
        f"### {table.title}",
        "",
        "| " + " | ".join(map(_md_cell, header)) + " |",
        "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    for label, cells, style in table.rows:
        if style != "main":
            label, cells = f"*{label}*", [f"*{c}*" if c else "" for c in cells]
        lines.append("| " + " | ".join(_md_cell(c) for c in [label, *cells]) + " |")
    lines.append("")
    lines += [f"{index}. {note}" for index, note in enumerate(table.notes, 1)]
    return "\n".join(lines) + "\n"


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SYMBOLS.get(char, char) for char in str(text))


def to_latex(table: Table) -> str:
    width = len(table.columns)
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        rf"\caption{{{latex_escape(table.title)}}}",
        r"\begin{tabular}{l" + "r" * (width - 1) + "}",
        r"\toprule",
    ]
    if table.groups and any(title for title, _ in table.groups):
        spans, rules, start = [], [], 1
        for title, span in table.groups:
            spans.append(
                rf"\multicolumn{{{span}}}{{c}}{{{latex_escape(title)}}}"
                if span > 1
                else latex_escape(title)
            )
            if title:
                rules.append(rf"\cmidrule(lr){{{start}-{start + span - 1}}}")
            start += span
        lines += [" & ".join(spans) + r" \\", " ".join(rules)]
    lines += [" & ".join(latex_escape(c) for c in table.columns) + r" \\", r"\midrule"]
    for label, cells, style in table.rows:
        row = [latex_escape(label), *(latex_escape(c) for c in cells)]
        if style != "main":
            row = [rf"\textit{{\footnotesize {c}}}" if c else "" for c in row]
        lines.append(" & ".join(row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    if table.notes:
        notes = " ".join(
            f"({index}) {latex_escape(note)}" for index, note in enumerate(table.notes, 1)
        )
        lines.append(rf"\par\smallskip\parbox{{\linewidth}}{{\footnotesize {notes}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"
