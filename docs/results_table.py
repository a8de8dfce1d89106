"""Combine the CSVs written by `bash docs/fmnist_budget.sh tables` into the resolution-transfer
table of docs/RESULTS.md (printed as markdown; also written to docs/results/transfer.md)."""

import csv
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def read(name: str) -> list[dict]:
    path = RESULTS / name / ("compare.csv" if name.startswith("train") else "resolution.csv")
    with open(path) as f:
        return list(csv.DictReader(f))


def main() -> None:
    # compare.csv holds one row per group of seeds (here one seed each): <metric>_mean columns
    trained = {row["pos"]: row for row in read("train_32px")}
    column = lambda row, name: row.get(f"{name}_mean", row.get(name))  # noqa: E731 - older tables: no _mean
    no_ft = {(r["pos"], r["img_size"]): float(r["acc"]) for r in read("resolution_no_finetune")}
    interp = {(r["pos"], r["img_size"]): float(r["acc"]) for r in read("resolution_no_finetune_interpolate")}
    tuned = {
        (r["pos"], r["img_size"]): float(r["acc"]) for name in ("finetuned_48px", "finetuned_64px") for r in read(name)
    }
    pct = lambda value: f"{100 * value:.1f}" if value is not None else "-"  # noqa: E731
    lines = [
        "| pos | val best @32 | test @32 | @48 no FT | @64 no FT | @48 FT | @64 FT |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for pos in sorted(trained, key=lambda p: -float(column(trained[p], "test_acc"))):
        cells = [pct(float(column(trained[pos], "val_acc_best"))), pct(no_ft.get((pos, "32px")))]
        for size in ("48px", "64px"):
            value = pct(no_ft.get((pos, size)))
            if (pos, size) in interp:
                value += f" / {pct(interp[(pos, size)])} (interp.)"
            cells.append(value)
        cells += [pct(tuned.get((pos, "48px"))), pct(tuned.get((pos, "64px")))]
        lines.append(f"| {pos} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    (RESULTS / "transfer.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
