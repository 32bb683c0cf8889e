"""Reports people read, built from the tidy table and the per-node counts: paper tables
(LaTeX/Markdown), figures (matplotlib, inline SVG), the self-contained HTML report, and the
history of a zoo evaluated on a schedule."""
