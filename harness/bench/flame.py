"""An SVG icicle graph (a flame graph with the root at the top) from py-spy's raw output, the
collapsed stacks ``frame;frame;...;leaf count`` one per line.  Frames are merged by function
and file (line numbers dropped); each box is as wide as the samples under it, and its tooltip
says how many.  Written without any tool beyond the standard library.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

_LINE = re.compile(r":\d+\)$")
WIDTH, ROW, FONT = 1200.0, 17, 11
CHAR_PX = 6.4  # about one character of an 11 px monospace font


def _tree(raw: str) -> tuple[dict[str, Any], int]:
    root: dict[str, Any] = {"n": 0, "kids": {}}
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        root["n"] += count
        node = root
        for frame in stack.split(";"):
            node = node["kids"].setdefault(_LINE.sub(")", frame), {"n": 0, "kids": {}})
            node["n"] += count
    return root, root["n"]


def _colour(frame: str) -> str:
    if "zabby/" in frame:
        return "#e8835a"
    if "trio/" in frame:
        return "#6f9fd8"
    if "kazoo/" in frame or "site-packages/" in frame:
        return "#9bc27a"
    return "#c9c9c9"


def _boxes(node: dict[str, Any], name: str, x: float, depth: int, scale: float, total: int, out: list[str]) -> int:
    """Draw ``node`` and its children; returns the depth reached."""
    width = node["n"] * scale
    if width < 0.4:
        return depth
    y = depth * ROW
    label = html.escape(name)
    tip = f"{label} — {node['n']:,} samples ({100 * node['n'] / total:.1f}%)"
    out.append(f'<g><title>{tip}</title><rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{ROW - 1}" fill="{_colour(name)}" rx="2"/>')
    chars = int((width - 4) / CHAR_PX)
    if chars >= 4:
        text = name if len(name) <= chars else name[: chars - 1] + "…"
        out.append(f'<text x="{x + 2:.1f}" y="{y + ROW - 5}">{html.escape(text)}</text>')
    out.append("</g>")
    deepest = depth
    for child_name, child in sorted(node["kids"].items(), key=lambda item: -item[1]["n"]):
        deepest = max(deepest, _boxes(child, child_name, x, depth + 1, scale, total, out))
        x += child["n"] * scale
    return deepest


def write_svg(raw_path: Path, svg_path: Path, title: str) -> bool:
    """The icicle graph of ``raw_path`` as ``svg_path``; False when it holds no samples."""
    root, total = _tree(raw_path.read_text(errors="replace"))
    if not total:
        return False
    body: list[str] = []
    depth = _boxes(root, f"all ({total:,} samples)", 0.0, 1, WIDTH / total, total, body)
    height = (depth + 2) * ROW + 10
    header = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH:.0f}" height="{height}" font-family="monospace" font-size="{FONT}">'
              f'<rect width="100%" height="100%" fill="white"/>'
              f'<text x="4" y="{ROW - 4}" font-size="{FONT + 2}">{html.escape(title)}</text>')  # fmt: skip
    svg_path.write_text(header + "".join(body) + "</svg>\n")
    return True
