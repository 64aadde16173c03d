"""The commands the project's docs show, read out of their Markdown, and a way to run them as shown.

Which commands (the rule test_documented_commands.py holds the docs to), in README.md, docs/*.md
and deploy/README.md, parsed as CommonMark (markdown-it-py, as a renderer reads them):

- **shell**: every command of a fenced block marked `bash`, `sh` or `shell` (a line that is not
  blank and not a comment; `\\` continuations joined; a here-document belongs to its command), and
  every `$ ` line of a `console` block (the lines after it, up to the next `$ `, are its output);
- **shell** too: a line starting with `rag-pipeline ` in any other fenced block (after a YAML list
  dash or `run:`: the commands of the CI examples);
- **synopsis**: the lines of an unmarked fenced block that starts with `rag-pipeline ` and shows
  optional flags in brackets (README's "The command line"); an indented line continues the one above;
- **inline**: a code span starting with `rag-pipeline ` in the prose (only its flags are checked).

A command's text is the line as shown with its trailing `# comment` removed and runs of white
space made one space: the key under which it is run or listed as not runnable.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

from rag_pipeline.config import PROJECT_ROOT
from rag_pipeline_tests.e2e.cli import OFFLINE

SHELL_INFO = {"bash", "sh", "shell"}
_RAG_LINE = re.compile(r"^\s*(?:-\s+)?(?:run:\s+)?(rag-pipeline\s.*)$")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
_WORD = re.compile(r"[a-z][a-z-]*")


@dataclass(frozen=True)
class Shown:
    """One command a doc shows."""

    doc: str  # relative to the project root
    line: int  # 1-based, in the doc
    text: str
    kind: str  # "shell", "synopsis" or "inline"
    output: str = ""  # console blocks: what the doc shows it printing

    @property
    def key(self) -> tuple[str, str]:
        return self.doc, self.text


def doc_files() -> list[Path]:
    return [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md")), PROJECT_ROOT / "deploy" / "README.md"]


def without_comment(line: str) -> str:
    """`line` up to a `#` that starts a shell comment (at the start, or after a blank, outside quotes)."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index]
    return line


def _normal(text: str) -> str:
    return " ".join(text.split())


def _shell_commands(content: str) -> list[tuple[int, str]]:
    lines = content.splitlines()
    commands, index = [], 0
    while index < len(lines):
        start, line = index, without_comment(lines[index]).rstrip()
        index += 1
        if not line.strip():
            continue
        while line.endswith("\\") and index < len(lines):
            line = line[:-1] + " " + without_comment(lines[index]).strip()
            index += 1
        heredoc = _HEREDOC.search(line)
        if heredoc:  # the here-document's lines are its command's input, not commands
            while index < len(lines) and lines[index].strip() != heredoc.group(2):
                index += 1
            index += 1
        commands.append((start, _normal(line)))
    return commands


def _console_commands(content: str) -> list[tuple[int, str, str]]:
    commands: list[tuple[int, str, str]] = []
    for offset, line in enumerate(content.splitlines()):
        if line.startswith("$ "):
            commands.append((offset, _normal(without_comment(line[2:])), ""))
        elif commands:
            first, text, output = commands[-1]
            commands[-1] = (first, text, output + line + "\n")
    return commands


def _synopsis(content: str) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    for offset, line in enumerate(content.splitlines()):
        if line.startswith("rag-pipeline "):
            lines.append((offset, line))
        elif line.strip() and lines:
            lines[-1] = (lines[-1][0], lines[-1][1] + " " + line.strip())
    return [(offset, _normal(text)) for offset, text in lines]


def shown_commands(files: list[Path] | None = None) -> list[Shown]:
    """Every command the docs show, by the rule in this module's docstring."""
    shown: list[Shown] = []
    parser = MarkdownIt("commonmark")
    for path in files or doc_files():
        doc = path.relative_to(PROJECT_ROOT).as_posix() if path.is_relative_to(PROJECT_ROOT) else path.name
        text = path.read_text(encoding="utf-8")
        for token in parser.parse(text):
            first = token.map[0] + 2 if token.map else 0  # the fence's first content line, 1-based
            info = token.info.strip().split(" ")[0] if token.type == "fence" else ""
            if token.type == "fence" and info in SHELL_INFO:
                shown += [Shown(doc, first + n, command, "shell") for n, command in _shell_commands(token.content)]
            elif token.type == "fence" and info == "console":
                shown += [Shown(doc, first + n, command, "shell", out) for n, command, out in _console_commands(token.content)]
            elif token.type == "fence" and not info and token.content.startswith("rag-pipeline ") and "[" in token.content:
                shown += [Shown(doc, first + n, line, "synopsis") for n, line in _synopsis(token.content)]
            elif token.type == "fence":
                for n, line in enumerate(token.content.splitlines()):
                    match = _RAG_LINE.match(line)
                    if match:
                        shown.append(Shown(doc, first + n, _normal(without_comment(match.group(1))), "shell"))
            elif token.type == "inline":
                for child in token.children or []:
                    if child.type == "code_inline" and child.content.startswith("rag-pipeline "):
                        shown.append(Shown(doc, token.map[0] + 1, _normal(child.content), "inline"))
    return shown


def fence_after(doc: str, marker: str, info: str) -> str:
    """The content of the first `info` fenced block after the line holding `marker` in `doc`."""
    text = (PROJECT_ROOT / doc).read_text(encoding="utf-8")
    after = text[:text.index(marker)].count("\n")
    for token in MarkdownIt("commonmark").parse(text):
        if token.type == "fence" and token.info.strip() == info and token.map and token.map[0] > after:
            return token.content
    raise AssertionError(f"{doc}: no {info} block after {marker!r}")


def help_text(*subcommand: str) -> str:
    """`rag-pipeline SUBCOMMAND --help` as argparse prints it (in process: the parser only)."""
    from rag_pipeline.cli.main import build_parser

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()), contextlib.suppress(SystemExit):
        build_parser().parse_args([*subcommand, "--help"])
    return out.getvalue()


# Commands whose second word is a subcommand of their own.
NESTED = ("golden", "index")


def flag_problems(shown: Shown) -> list[str]:
    """What in `shown` (a rag-pipeline command) its parser does not accept: the subcommand, a flag,
    or a choice of a flag (`--mode dense|bm25|hybrid`)."""
    words = shlex.split(shown.text.replace("[", " ").replace("]", " "))[1:]
    if not words or not _WORD.fullmatch(words[0]):
        return []  # `rag-pipeline` named in prose, or `rag-pipeline COMMAND --help`
    commands = [(words[0],)]
    if words[0] in NESTED:  # `golden triage | accept | ...` names several subcommands, `golden accept FILE` one
        names = [word for word in words[1:] if _WORD.fullmatch(word)] if "|" in words else words[1:2]
        commands = [(words[0], name) for name in names] or commands
    elif words[0] == "gate" and len(words) > 1 and _WORD.fullmatch(words[1]):  # `gate waive ...`, `gate waivers`
        commands = [("gate", words[1])]
    problems = [f"no subcommand `rag-pipeline {' '.join(c)}`" for c in commands if "usage:" not in help_text(*c)]
    # A line naming several subcommands shows the flags of any of them (`index list | restore --to ...`).
    usage = "\n".join(help_text(*c) for c in commands)
    for before, word in zip([""] + words, words, strict=False):
        if _FLAG.fullmatch(word) and not re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", usage):
            problems.append(f"`{' '.join(commands[0])}` has no flag {word}")
        elif "|" in word and _FLAG.fullmatch(before) and f"{before} {word}" not in usage:  # not the metavar as shown
            choices = re.search(rf"{re.escape(before)} \{{([^}}]*)\}}", usage)
            if choices is None or set(word.split("|")) != set(choices.group(1).split(",")):
                problems.append(f"`{before} {word}`: the parser's choices are {choices.group(1) if choices else 'none'}")
    return problems


def run_shown(text: str, cwd: Path, env: dict[str, str] | None = None, substitutions: dict[str, str] | None = None,
              timeout: int = 900) -> subprocess.CompletedProcess:
    """Run a documented command as its doc shows it: `rag-pipeline` is this checkout's
    `python -m rag_pipeline.cli`; anything else (or several lines) runs in bash. A placeholder of
    `substitutions` (a whole word or path) is replaced by its value."""
    full_env = {**os.environ, **OFFLINE, **(env or {})}
    if "DAGSTER_HOME" not in (env or {}):
        full_env.pop("DAGSTER_HOME", None)
    for placeholder, value in (substitutions or {}).items():
        text = re.sub(rf"(?<![\w./-]){re.escape(placeholder)}(?![\w-])", lambda _: value, text)
    if text.startswith("rag-pipeline ") and "\n" not in text:
        command = [sys.executable, "-m", "rag_pipeline.cli", *shlex.split(text)[1:]]
    else:  # a line for the shell, or several lines run in one shell
        command = ["bash", "-e", "-c", text]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=full_env, timeout=timeout)


_TROUBLE = re.compile(r"^(usage: |error: |rag-pipeline[\w -]*: error: )|unrecognized arguments|^Traceback \(most recent")


def usage_trouble(result: subprocess.CompletedProcess) -> list[str]:
    """Signs that a command was not run as meant: argparse's usage or error lines, an error, a traceback."""
    return [line for line in (result.stderr + result.stdout).splitlines() if _TROUBLE.search(line)]
