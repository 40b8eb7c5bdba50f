"""The fixes section of `explain-retracing`'s output: text after the summary table, and JSON lines.

One entry per function that retraced: the fix, what varies, the code to paste and the line to change, and
with `--verify` the second run's verdict (traces before / after, outputs equal or where they differed, what
still retraced).  JSON lines carry `"record": "fix"` so they are told apart from the event lines, whose
fields stay exactly `events.JSON_FIELDS`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from myxtts.diagnostics.fixes import Proposal
from myxtts.diagnostics.verify import VERIFIED, Verification

FIX_RECORD = "fix"


def format_fixes(proposals: list[Proposal], verifications: list[Verification] | None = None) -> str:
    if not proposals:
        return "Fixes: none needed (no function retraced)."
    header = "Fixes (one per function, from every traced call; --verify applies each and runs the program again)"
    if verifications is not None:
        header = ("Fixes (one per function, from every traced call; verified by running the program again with each "
                  "applied)" if any(v.traces_after is not None for v in verifications) else
                  "Fixes (one per function, from every traced call; none can be applied mechanically, so the "
                  "program was not run again)")
    lines = [header]
    for index, proposal in enumerate(proposals):
        verification = verifications[index] if verifications is not None else None
        lines.append(f"{index + 1}. {proposal.function} ({proposal.defined_at}): {proposal.kind}"
                     f"{_verdict(proposal, verification)}")
        if proposal.varying:
            lines.append(f"   varies: {'; '.join(proposal.varying[:8])}")
        lines.append(f"   {proposal.text}")
        if proposal.code:
            lines.append("   code:")
            lines.extend(f"     {line}" for line in proposal.code.splitlines())
        if proposal.lines_to_change:
            lines.append(f"   change: {', '.join(proposal.lines_to_change)}"
                         + ("" if proposal.mechanical else " (not mechanically applicable: edit by hand)"))
    if verifications is not None:
        verified = sum(1 for v in verifications if v.status == VERIFIED)
        lines.append(f"verified: {verified} of {len(proposals)} fix(es)")
    return "\n".join(lines)


def _verdict(proposal: Proposal, verification: Verification | None) -> str:
    if verification is None:
        return f"; {proposal.traces} traces, {proposal.retraces} retrace(s)"
    if verification.traces_after is None:  # not run again: nothing could be applied
        text = f" -> {verification.status.upper()}: {verification.traces_before} traces"
    else:
        text = (f" -> {verification.status.upper()}: traces {verification.traces_before} -> "
                f"{verification.traces_after}")
    if verification.outputs_equal is not None:
        text += f", outputs {verification.outputs}"
    if verification.applied and proposal.mechanical:
        text += f" (applied: {verification.applied})"
    if verification.reason:
        text += f"; {verification.reason}"
    if verification.note:
        text += f"; {verification.note}"
    return text


def fix_records(proposals: list[Proposal], verifications: list[Verification] | None = None) -> list[dict[str, Any]]:
    records = []
    for index, proposal in enumerate(proposals):
        record = {"record": FIX_RECORD, **proposal.to_dict()}
        record["verification"] = verifications[index].to_dict() if verifications is not None else None
        records.append(record)
    return records


def append_json_lines(path: str | Path, records: list[dict[str, Any]]) -> None:
    """Append one line per fix to the events file written by the run (created when absent)."""
    with Path(path).open("a", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, default=str) + "\n")
