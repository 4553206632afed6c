"""Pure: what a drill measured turned into numbers (flows, jobs, counters,
the analytical reference), whether those numbers can be trusted (trust, the
one place that decides), the expectations judged on them, and the report
(Markdown, plots, side-by-side comparison)."""
