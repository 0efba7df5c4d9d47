"""A plan result as a table for people (``numaguard plan -o table``)."""

from __future__ import annotations

from typing import Any


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(map(str, value)) or "-"
    return str(value)


def render(result: dict[str, Any]) -> str:
    lines: list[str] = []
    for i, step in enumerate(result["steps"]):
        verdict = "admitted" if step["admitted"] else "REJECTED"
        if "resize" in step:
            verdict = step["resize"]
        head = f"[{i}] {step['op']:<6} {step['pod']:<40} {verdict}"
        if step.get("qosClass"):
            head += f"  qos={step['qosClass']}"
        if step.get("numaAffinity") is not None:
            head += f"  numa={_cell(step['numaAffinity'])}"
        lines.append(head)
        if step.get("reason"):
            lines.append(f"      reason: {step['reason']}: {step.get('message') or ''}")
        pool = step.get("podSharedPool")
        if pool:
            nodes = _cell(pool.get("memoryNUMANodes"))
            lines.append(f"      pod shared pool: cpus {pool.get('cpus') or '-'}  memory NUMA {nodes}")
        containers = step.get("containers") or {}
        if containers:
            rows = [("container", "cpu assignment", "cpus", "memory", "memory NUMA", "cfs quota")]
            for name, c in containers.items():
                rows.append(
                    (
                        name,
                        c["assignment"],
                        _cell(c.get("cpus")),
                        c["memoryAssignment"],
                        _cell(c.get("memoryNUMANodes")),
                        c["cfsQuota"],
                    )
                )
            widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
            for r in rows:
                lines.append("      " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
        if step.get("resizesApplied"):
            lines.append(f"      resizes applied: {', '.join(step['resizesApplied'])}")
    return "\n".join(lines)
