"""Two zero-shot reports (``benchmarks/zero_shot.py --json``) compared output by output: variant minus control.

Outputs pair by (set, speaker, condition, text): the same voice saying the same sentence through two models. Per set
and over all held-out sets: the mean paired difference of each measure an output carries (margin, own cosine,
naturalness) with its standard error, and the two reports' summaries side by side (identified, margin, WER, CER,
naturalness). Sets named ``SET seen`` (``--seen-speakers``) are compared too but stay out of the pooled figure.

Run: ``.venv/bin/python benchmarks/zero_shot_compare.py CONTROL.json VARIANT.json --json OUT.json``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

MEASURES = ("margin", "own_cosine", "naturalness")
SUMMARY_KEYS = ("identified", "margin", "own_cosine", "wer", "cer", "naturalness")


def outputs_by_key(report: dict) -> dict[tuple, dict]:
    return {(set_name, row["speaker"], row["condition"], row["text"]): row
            for set_name, point in report["sets"].items() for row in point["outputs"]}


def paired(control: dict, variant: dict) -> dict:
    """{"SET/measure": {mean, standard_error, n}} of variant minus control, per set and pooled over held-out sets."""
    first, second = outputs_by_key(control), outputs_by_key(variant)
    shared = sorted(set(first) & set(second))
    if not shared:
        raise SystemExit("Error: the two reports share no output (same cache, texts and conditions?).")
    groups: dict[str, list[tuple]] = {}
    for key in shared:
        groups.setdefault(key[0], []).append(key)
        if not key[0].endswith(" seen"):
            groups.setdefault("held-out sets", []).append(key)
    result = {}
    for group, keys in groups.items():
        for measure in MEASURES:
            differences = [second[k][measure] - first[k][measure] for k in keys
                           if first[k].get(measure) is not None and second[k].get(measure) is not None]
            if differences:
                values = np.asarray(differences, np.float64)
                error = float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else None
                result[f"{group}/{measure}"] = {"mean": float(values.mean()), "standard_error": error,
                                                "n": len(values)}
    return result


def summaries(report: dict) -> dict:
    return {f"{set_name}/{condition}": {key: summary.get(key) for key in SUMMARY_KEYS}
            for set_name, point in report["sets"].items() for condition, summary in point["conditions"].items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("control")
    parser.add_argument("variant")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    control, variant = (json.loads(Path(path).read_text(encoding="utf-8")) for path in (args.control, args.variant))
    report = {"control": {"report": args.control, "run": control.get("run"), "checkpoint": control.get("checkpoint"),
                          "summaries": summaries(control)},
              "variant": {"report": args.variant, "run": variant.get("run"), "checkpoint": variant.get("checkpoint"),
                          "summaries": summaries(variant)},
              "variant_minus_control": paired(control, variant)}
    for name, point in report["control"]["summaries"].items():
        other = report["variant"]["summaries"].get(name, {})
        cells = [f"{key} {point[key]:.3f} -> {other[key]:.3f}" for key in SUMMARY_KEYS
                 if point.get(key) is not None and other.get(key) is not None]
        print(f"{name}: " + ", ".join(cells))
    for name, figure in report["variant_minus_control"].items():
        error = "n/a" if figure["standard_error"] is None else f"{figure['standard_error']:.4f}"
        print(f"paired {name}: {figure['mean']:+.4f} (SE {error}, n {figure['n']})")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
