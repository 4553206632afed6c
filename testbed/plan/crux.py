"""`hpnlab crux plan` as text (pure): what Crux would decide for a
scenario's jobs, from the plan the controller's placement computes."""

from testbed.results.text import fmt, md_table


def render_crux_plan(name, plan, levels_from):
    """Markdown: per job its intensity, correction factor, priority and
    compressed class, the contention between jobs, and every connection's
    path (the egress interfaces it leaves by)."""
    parts = [
        f"# Crux plan: {name}",
        f"{plan['level_count']} priority levels ({levels_from}); class 0 is served first.",
    ]
    rows = [
        [
            job,
            fmt(plan["intensities"][job]),
            fmt(plan["factors"][job]),
            fmt(plan["priorities"][job]),
            plan["levels"][job],
        ]
        for job in plan["order"]
    ]
    parts.append(md_table(["job (by priority)", "GPU intensity I", "k", "priority P = k I", "class"], rows))
    parts.append(
        f"Reference job (k = 1, the most traffic): {plan['reference']}. "
        f"Jobs chose paths in this order: {', '.join(plan['selection_order'])}."
    )
    if plan["edges"]:
        rows = [[e["high"], e["low"], fmt(e["weight"])] for e in plan["edges"]]
        kept = plan["cut"] / plan["total_weight"] if plan["total_weight"] else 1.0
        parts.append(
            "Contention (jobs that share a link; the weight is what serving the "
            "higher first is worth):\n\n"
            + md_table(["higher", "lower", "weight"], rows)
            + f"\n\nThe compression keeps {fmt(100 * kept)}% of that weight in "
            "separate classes."
        )
    else:
        parts.append("No two jobs share a link on their chosen paths: nothing contends.")
    rows = [
        [job, flow, " > ".join(path)]
        for job in plan["order"]
        for flow, path in sorted(plan["paths"][job].items())
    ]
    parts.append("Paths:\n\n" + md_table(["job", "connection", "path"], rows))
    return "\n\n".join(parts) + "\n"
