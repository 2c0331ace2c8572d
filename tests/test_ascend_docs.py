"""docs/ascend.zh.md cannot drift from docs/ascend.md: every command line in the English page's shell code blocks
appears in the Chinese page too (comments are translated, commands are not)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def command_lines(page: Path) -> list[str]:
    """The lines of the page's ```bash blocks without their comments: whole-line ones, and a command's trailing
    `  # ...`."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
        for line in block.splitlines():
            command = re.split(r"\s{2,}#", line.strip())[0].strip()
            if command and not command.startswith("#"):
                lines.append(command)
    return lines


def test_every_command_of_the_english_page_is_in_the_chinese_page():
    english = command_lines(ROOT / "docs/ascend.md")
    assert len(english) >= 12  # the five steps, the zero-copy A/B and the two nodes
    chinese = set(command_lines(ROOT / "docs/ascend.zh.md"))
    assert [line for line in english if line not in chinese] == []


def test_the_readme_links_the_chinese_page():
    assert "(docs/ascend.zh.md)" in (ROOT / "README.md").read_text()
