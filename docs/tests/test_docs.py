#!/usr/bin/env python3
"""Checks that README.md and the pages under docs/ stay true to the code and the binaries.

- Commands: every command in a ```sh block that names a project binary (stratad, strata,
  strata-controller, sim_engine, strata-bench, anything under build/release/, a Python script of
  the repository, a make target) is run with --help, and must exit 0; its subcommand must exist
  and every --flag it uses must appear in the help of the binary or of that subcommand. Commands
  of stratad and strata-controller with no placeholders are also dry-run with --print-config,
  which parses and validates everything they were given; `strata hash` runs for real (it needs no
  daemon). A make target must exist in the Makefile.
- Configuration: the keys in docs/operations.md's `[section]` tables are exactly the keys
  daemon/config.cc reads, and exactly those `stratad --print-config` prints; the defaults written
  there as literals are the daemon's. The same for docs/cluster.md and strata-controller
  (controller/server/controller_config.cc). The flags table lists exactly stratad's flags, the CLI
  table exactly strata's commands, and every ```toml block is a file the daemon (or, with a
  [controller], [daemons], [route] or [vllm] section, the controller) accepts.
- Metrics: docs/operations.md's metrics table lists exactly the metric families daemon/ defines.
- Links: every relative link and image resolves, anchors included; every repository path written
  in backticks exists; paths under build/release/ name targets of the build.
- The architecture picture holds every label of its source (docs/architecture.dot), and no page
  tells how the work on the project was organised.

ctest runs each case as its own entry, docs_test.<Class>.<case> (docs/CMakeLists.txt lists them
with --list). Environment: STRATA_BUILD_DIR, the build tree whose binaries are checked (default:
build/release). A case whose binaries are not built reports skipped, with the reason, as gtest's
GTEST_SKIP does, so ctest's SKIP_REGULAR_EXPRESSION and scripts/test_summary.py show it.

Usage: test_docs.py [--list | Class.case ...]
"""

import html
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile
import tomllib
import unittest

DOCS = pathlib.Path(__file__).resolve().parent.parent
REPO = DOCS.parent
sys.path.insert(0, str(REPO / "tests" / "support"))
import python_cases  # noqa: E402

PAGES = [REPO / "README.md"] + sorted(DOCS.glob("*.md"))
BUILD = pathlib.Path(os.environ.get("STRATA_BUILD_DIR") or REPO / "build" / "release")
DOC_BUILD_PREFIX = "build/release/"
# Binaries the pages may name without a path, and where the build puts them.
NAMED_BINARIES = {
    "stratad": "daemon/stratad",
    "strata": "cli/strata",
    "strata-controller": "controller/server/strata-controller",
    "sim_engine": "bench/engine/sim_engine",
    "strata-bench": "bench/strata-bench",
}
DRY_RUN_BINARIES = {"stratad", "strata-controller"}
# The repository's top-level directories: a backticked path starting with one must exist.
TOP_DIRS = {p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")} - {"build"}
WRAPPERS = {"sudo", "env", "nohup", "time", "exec"}
SEPARATORS = {"&&", "||", ";", "|", "&"}
CONTROLLER_SECTIONS = {"controller", "daemons", "route", "vllm"}
WORK_HISTORY = [
    r"\bissue\s*#?\d+",
    r"\(issue\b",
    r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
    r"\w+teenth|twentieth|twenty-\w+|thirtieth|thirty-\w+|previous|earlier|later)\s+(?:session|stop)s?\b",
    r"\bsessions?\s+\(20\d\d",
    r"\bstop of 20\d\d",
    r"\blent\b",
]


def run(command, timeout=30, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)


def quiet_env():
    """The environment for the binaries: no runtime dir, so defaults do not depend on the caller."""
    env = dict(os.environ)
    env.pop("XDG_RUNTIME_DIR", None)
    return env


# ---- Markdown -----------------------------------------------------------------------------


def split_fences(path):
    """(prose lines with their numbers, code blocks as (language, first line number, lines))."""
    prose, blocks = [], []
    block = None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = re.match(r"^\s*```\s*([\w+-]*)", line)
        if fence and block is None:
            block = (fence.group(1).lower(), number + 1, [])
        elif fence and block is not None:
            blocks.append(block)
            block = None
        elif block is not None:
            block[2].append(line)
        else:
            prose.append((number, line))
    return prose, blocks


def slug(heading):
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen, result = {}, set()
    for _, line in split_fences(path)[0]:
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def table_rows(lines):
    """Cells of the table rows among `lines` (header and separator rows left out)."""
    rows = []
    for _, line in lines:
        if not line.startswith("|"):
            continue
        cells = [c.strip().replace("\\|", "|")
                 for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if all(re.fullmatch(r":?-+:?", c) for c in cells if c):
            continue
        rows.append(cells)
    return rows[1:] if rows else rows


def section_lines(path, heading_pattern):
    """The prose lines under the first heading matching `heading_pattern`, to the next heading."""
    lines, inside, level = [], False, 0
    for number, line in split_fences(path)[0]:
        heading = re.match(r"^(#{1,6})\s+(.*)$", line)
        if heading and inside and len(heading.group(1)) <= level:
            break
        if heading and not inside and re.fullmatch(heading_pattern, heading.group(2).strip()):
            inside, level = True, len(heading.group(1))
            continue
        if inside:
            lines.append((number, line))
    return lines


def backticked(cell):
    match = re.fullmatch(r"`([^`]+)`", cell.strip())
    return match.group(1) if match else None


def config_tables(path):
    """{section: {key: default cell}} from the tables under headings like ### `[host]`."""
    tables, section = {}, None
    for number, line in split_fences(path)[0]:
        heading = re.match(r"^#{1,6}\s+(.*)$", line)
        if heading:
            match = re.fullmatch(r"`\[([\w.]+)\]`", heading.group(1).strip())
            section = match.group(1) if match else None
            if section:
                tables.setdefault(section, {})
            continue
        if section and line.startswith("|"):
            for cells in table_rows([(number, line)]) or [re.split(r"(?<!\\)\|",
                                                                    line.strip().strip("|"))]:
                key = backticked(cells[0].strip())
                if key and not key.startswith("<"):
                    tables[section][key] = cells[1].strip() if len(cells) > 1 else ""
    return tables


# ---- Parsers and binaries ------------------------------------------------------------------


def function_body(source, signature):
    start = source.find(signature)
    if start < 0:
        raise AssertionError(f"no `{signature}` in the parser: the test must learn its new shape")
    end = source.find("\n}\n", start)
    return source[start:end]


def daemon_parser_keys():
    """{section: keys} that daemon/config.cc reads, subsections ("host.tenant_codecs") included."""
    source = (REPO / "daemon" / "config.cc").read_text()
    codec_keys = set(re.findall(r'key == "(\w+)"', function_body(source, "ReadCodecKey(")))
    tenant_fields = set(re.findall(r'field == "(\w+)"', function_body(source, "ReadTenantCodecs(")))
    keys, section = {}, None
    for line in function_body(source, "absl::Status ApplyTable(").splitlines():
        match = re.search(r'section == "(\w+)"', line)
        if match:
            section = match.group(1)
            keys.setdefault(section, set())
        if section is None:
            continue
        keys[section] |= set(re.findall(r'\bkey == "(\w+)"', line))
        if "ReadCodecKey(" in line:
            keys[section] |= codec_keys
    for section in list(keys):
        if "tenant_codecs" in keys[section]:
            keys[f"{section}.tenant_codecs"] = set(tenant_fields)
    return keys


def controller_parser_keys():
    source = (REPO / "controller" / "server" / "controller_config.cc").read_text()
    keys, section = {}, None
    for line in function_body(source, "absl::Status ApplyTable(").splitlines():
        match = re.search(r'section == "(\w+)"', line)
        if match:
            section = match.group(1)
            keys.setdefault(section, set())
        if section is not None:
            keys[section] |= set(re.findall(r'\bkey == "(\w+)"', line))
    return keys


def printed_keys(printed):
    """{section: keys} of a --print-config document; a table of tables (tenant -> fields) adds a
    subsection of the fields, a table of values (tenant -> size) none."""
    keys = {}
    for section, table in printed.items():
        keys.setdefault(section, set())
        for key, value in table.items():
            keys[section].add(key)
            if isinstance(value, dict):
                fields = set()
                for inner in value.values():
                    if isinstance(inner, dict):
                        fields |= set(inner)
                if fields:
                    keys[f"{section}.{key}"] = fields
    return keys


def binary(relative):
    path = BUILD / relative
    return path if path.is_file() and os.access(path, os.X_OK) else None


def require(relative):
    path = binary(relative)
    if path is None:
        raise unittest.SkipTest(f"{BUILD / relative} is not built")
    return path


def print_config(path, *args, cwd=None):
    result = run([str(path), *args, "--print-config"], cwd=cwd, env=quiet_env())
    if result.returncode != 0:
        raise AssertionError(f"{path.name} {' '.join(args)} --print-config: {result.stderr}")
    return tomllib.loads(result.stdout)


def help_flags(text):
    return set(re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*)", text)) - {"--help"}


def cli11_subcommands(text):
    match = re.search(r"^Subcommands:\n((?:[ \t]+.*\n?)*)", text, re.M)
    if not match:
        return set()
    return {line.split()[0] for line in match.group(1).splitlines() if line.strip()}


def cli11_value_options(text):
    """Options whose help line shows a value type (they take the next word)."""
    return {m.group(1) for m in re.finditer(r"^\s+(?:-\w,)?(--[\w-]+) [A-Z]", text, re.M)}


def compare_keys(test, what, documented, parsed):
    sections = set(documented) | set(parsed)
    problems = []
    for section in sorted(sections):
        doc, code = documented.get(section, set()), parsed.get(section, set())
        for key in sorted(doc - code):
            problems.append(f"[{section}] {key} is documented but {what} has no such key")
        for key in sorted(code - doc):
            problems.append(f"[{section}] {key} is in {what} but not documented")
    test.assertFalse(problems, "\n".join(problems))


def literal(cell):
    """The value of a default written as one backticked TOML literal; None for prose."""
    text = backticked(cell)
    if text is None:
        return None
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return None


def compare_defaults(test, tables, printed):
    problems = []
    for section, rows in tables.items():
        parent, _, child = section.partition(".")
        for key, cell in rows.items():
            want = literal(cell)
            if want is None:
                continue
            if child:
                entries = printed.get(parent, {}).get(child, {})
                have_table = next((v for v in entries.values() if isinstance(v, dict)), None)
                if have_table is None or key not in have_table:
                    continue
                have = have_table[key]
            else:
                if key not in printed.get(section, {}):
                    problems.append(f"[{section}] {key}: documented default {cell}, not printed")
                    continue
                have = printed[section][key]
            same = (float(want) == float(have)
                    if isinstance(want, (int, float)) and isinstance(have, (int, float))
                    and not isinstance(want, bool) and not isinstance(have, bool)
                    else want == have)
            if not same:
                problems.append(f"[{section}] {key}: documented default {cell}, the binary's {have!r}")
    test.assertFalse(problems, "\n".join(problems))


# ---- Shell commands ------------------------------------------------------------------------


def logical_lines(lines):
    """Command lines of a shell block: continuations joined, quotes spanning lines joined."""
    buffer = ""
    for line in lines:
        buffer = f"{buffer}\n{line}" if buffer else line
        if buffer.endswith("\\"):
            buffer = buffer[:-1]
            continue
        try:
            shlex.split(buffer, comments=True)
        except ValueError:
            continue
        yield buffer
        buffer = ""
    if buffer:
        yield buffer


def tokenize(line):
    line = re.sub(r"\$\([^()]*\)", "__SUBST__", line)
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def commands(tokens):
    """Split on ;, &&, ||, | and &; a segment that starts with a flag or a placeholder continues
    the one before (`--key KEY | --tokens ...` lists alternatives, not a pipe)."""
    segments = [[]]
    for token in tokens:
        if token in SEPARATORS:
            segments.append([])
        else:
            segments[-1].append(token)
    merged = []
    for segment in segments:
        if merged and segment and (segment[0].startswith("-") or segment[0] == "..."):
            merged[-1].extend(segment)
        elif segment:
            merged.append(segment)
    return merged


def expand(token, variables):
    def value(match):
        return variables.get(match.group(1) or match.group(2), match.group(0))
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, token)


def is_placeholder(token):
    return (re.fullmatch(r"[A-Z][A-Z0-9_]*", token) is not None or "..." in token
            or "<" in token or "__SUBST__" in token or re.search(r"\[|\]", token) is not None)


def makefile_targets():
    return set(re.findall(r"^([\w.-]+):", (REPO / "Makefile").read_text(), re.M))


class CommandChecker:
    """Checks the project commands of the shell blocks of one page."""

    def __init__(self):
        self.failures, self.missing, self.unavailable, self.checked = [], [], [], 0
        self.helps = {}
        self.targets = makefile_targets()

    def help(self, command):
        key = tuple(command)
        if key not in self.helps:
            self.helps[key] = run([*command, "--help"], cwd=tempfile.gettempdir(), env=quiet_env())
        return self.helps[key]

    def page(self, path):
        for language, first, lines in split_fences(path)[1]:
            if language not in ("sh", "bash", "shell"):
                continue
            variables = {"PWD": str(REPO), "HOME": str(pathlib.Path.home())}
            for line in logical_lines(lines):
                for command in commands(tokenize(line)):
                    self.command(f"{path.relative_to(REPO)}:{first}", command, variables)

    def command(self, where, words, variables):
        words = [expand(w, variables) for w in words]
        while words and re.fullmatch(r"\w+=.*", words[0]):
            name, _, value = words.pop(0).partition("=")
            if not words:
                variables[name] = value
        while words and words[0] in WRAPPERS:
            words.pop(0)
        if words and words[0] == "timeout":
            words = words[2:]
        if not words:
            return
        program, args = words[0], words[1:]
        if program.startswith(str(REPO) + "/"):
            program = program[len(str(REPO)) + 1:]
        shown = " ".join(words)
        if program == "make":
            self.checked += 1
            for target in args:
                if not target.startswith("-") and "=" not in target and target not in self.targets:
                    self.failures.append(f"{where}: `{shown}`: the Makefile has no target {target}")
            return
        if os.path.basename(program).startswith("python"):
            scripts = [a for a in args if a.endswith(".py")]
            if scripts and not args[0].startswith("-m"):
                self.script(where, shown, scripts[0], args[args.index(scripts[0]) + 1:])
            return
        if program.endswith(".py"):
            self.script(where, shown, program, args)
            return
        if program.startswith(DOC_BUILD_PREFIX):
            relative = program[len(DOC_BUILD_PREFIX):]
        elif program in NAMED_BINARIES:
            relative = NAMED_BINARIES[program]
        else:
            first = program.split("/")[0]
            if "/" in program and first in TOP_DIRS and not (REPO / program).exists():
                self.failures.append(f"{where}: `{shown}`: {program} does not exist")
            return
        self.binary(where, shown, relative, args)

    def script(self, where, shown, script, args):
        path = REPO / script
        if not path.is_file():
            self.failures.append(f"{where}: `{shown}`: {script} does not exist")
            return
        result = run([sys.executable, str(path), "--help"], cwd=REPO)
        if result.returncode != 0:
            if "ModuleNotFoundError" in result.stderr:
                self.unavailable.append(f"{script} ({result.stderr.strip().splitlines()[-1]})")
            else:
                self.failures.append(f"{where}: `{shown}`: --help failed: {result.stderr}")
            return
        self.checked += 1
        self.flags(where, shown, args, [result.stdout])

    def binary(self, where, shown, relative, args):
        path = binary(relative)
        if path is None:
            self.missing.append(str(BUILD / relative))
            return
        self.checked += 1
        top = self.help([str(path)])
        if top.returncode != 0:
            self.failures.append(f"{where}: `{shown}`: --help exits {top.returncode}: {top.stderr}")
            return
        texts = [top.stdout + top.stderr]
        subcommands = cli11_subcommands(top.stdout)
        with_values = cli11_value_options(top.stdout)
        i = 0
        while i < len(args) and args[i].startswith("-"):
            i += 2 if "=" not in args[i] and args[i] in with_values else 1
        subcommand = None
        if subcommands and i < len(args):
            subcommand = args[i]
            if subcommand not in subcommands:
                self.failures.append(f"{where}: `{shown}`: {relative} has no subcommand {subcommand}")
                return
            sub = self.help([str(path), subcommand])
            if sub.returncode != 0:
                self.failures.append(f"{where}: `{shown}`: {subcommand} --help failed: {sub.stderr}")
                return
            texts.append(sub.stdout)
        elif subcommands:
            self.failures.append(f"{where}: `{shown}`: names no subcommand of {relative}")
            return
        if not self.flags(where, shown, args, texts):
            return
        if any(is_placeholder(a) for a in args):
            return
        name = os.path.basename(relative)
        if name in DRY_RUN_BINARIES:
            extra = [] if "--print-config" in args else ["--print-config"]
            with tempfile.TemporaryDirectory() as tmp:
                result = run([str(path), *args, *extra], cwd=tmp, env=quiet_env())
            if result.returncode != 0:
                self.failures.append(f"{where}: `{shown}` --print-config: {result.stderr.strip()}")
        elif name == "strata" and subcommand == "hash":
            result = run([str(path), *args], env=quiet_env())
            if result.returncode != 0:
                self.failures.append(f"{where}: `{shown}`: exits {result.returncode}: {result.stderr}")

    def flags(self, where, shown, args, texts):
        ok = True
        for arg in args:
            for flag in re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*)", arg):
                if not any(re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", t) for t in texts):
                    self.failures.append(f"{where}: `{shown}`: {flag} is in no --help")
                    ok = False
        return ok


# ---- The cases -----------------------------------------------------------------------------


class Commands(unittest.TestCase):
    def test_shell_blocks_run(self):
        checker = CommandChecker()
        for page in PAGES:
            checker.page(page)
        self.assertFalse(checker.failures, "\n".join(checker.failures))
        if checker.missing or checker.unavailable:
            self.skipTest(f"checked {checker.checked} commands; not built: "
                          f"{sorted(set(checker.missing))}; cannot run: {checker.unavailable}")
        self.assertGreater(checker.checked, 10, "found almost no project commands to check")

    def test_toml_blocks_are_accepted(self):
        stratad = require(NAMED_BINARIES["stratad"])
        controller = require(NAMED_BINARIES["strata-controller"])
        problems, seen = [], 0
        for page in PAGES:
            for language, first, lines in split_fences(page)[1]:
                if language != "toml":
                    continue
                seen += 1
                text = "\n".join(lines)
                sections = {s.split(".")[0] for s in re.findall(r"^\[([\w.]+)\]", text, re.M)}
                program = controller if sections & CONTROLLER_SECTIONS else stratad
                with tempfile.TemporaryDirectory() as tmp:
                    config = pathlib.Path(tmp) / "config.toml"
                    config.write_text(text)
                    result = run([str(program), "--config", str(config), "--print-config"],
                                 cwd=tmp, env=quiet_env())
                if result.returncode != 0:
                    problems.append(f"{page.relative_to(REPO)}:{first}: {program.name} refuses it: "
                                    f"{result.stderr.strip()}")
        self.assertFalse(problems, "\n".join(problems))
        self.assertGreater(seen, 0)

    def test_json_blocks_parse(self):
        for page in PAGES:
            for language, first, lines in split_fences(page)[1]:
                if language == "json":
                    with self.subTest(page=page.name, line=first):
                        json.loads("\n".join(lines))


class DaemonConfig(unittest.TestCase):
    PAGE = DOCS / "operations.md"

    def documented(self):
        return {s: set(rows) for s, rows in config_tables(self.PAGE).items()}

    def test_keys_match_the_parser(self):
        compare_keys(self, "daemon/config.cc", self.documented(), daemon_parser_keys())

    def test_keys_and_defaults_match_stratad(self):
        stratad = require(NAMED_BINARIES["stratad"])
        with tempfile.TemporaryDirectory() as tmp:
            config = pathlib.Path(tmp) / "all.toml"
            config.write_text(f"""
[host]
hard_pin_quota_bytes = "64MiB"
[host.tenant_quotas]
t = "64MiB"
[host.tenant_codecs]
t = {{}}
[disk]
directory = "{tmp}/disk"
capacity_bytes = "1GiB"
[disk.tenant_codecs]
t = {{}}
""")
            everything = print_config(stratad, "--config", str(config), "--host-capacity", "256MiB",
                                      cwd=tmp)
            defaults = print_config(stratad, cwd=tmp)
        compare_keys(self, "stratad --print-config", self.documented(), printed_keys(everything))
        tables = config_tables(self.PAGE)
        compare_defaults(self, {s: r for s, r in tables.items() if "." not in s}, defaults)
        compare_defaults(self, {s: r for s, r in tables.items() if "." in s}, everything)

    def assert_table_is_help(self, binary, section, parse):
        """The first column of `section`'s table is what `parse` reads from `binary --help`."""
        rows = table_rows(section_lines(self.PAGE, section))
        documented = {backticked(r[0]) for r in rows if backticked(r[0])}
        result = run([str(require(NAMED_BINARIES[binary])), "--help"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(documented, parse(result.stdout))

    def test_flags_table_lists_every_flag(self):
        self.assert_table_is_help("stratad", r"Command-line flags", help_flags)

    def test_cli_table_lists_every_command(self):
        self.assert_table_is_help("strata", r"The `strata` CLI", cli11_subcommands)


class ControllerConfig(unittest.TestCase):
    PAGE = DOCS / "cluster.md"

    def documented(self):
        return {s: set(rows) for s, rows in config_tables(self.PAGE).items()}

    def test_keys_match_the_parser(self):
        compare_keys(self, "controller/server/controller_config.cc", self.documented(),
                     controller_parser_keys())

    def test_keys_and_defaults_match_strata_controller(self):
        controller = require(NAMED_BINARIES["strata-controller"])
        with tempfile.TemporaryDirectory() as tmp:
            printed = print_config(controller, cwd=tmp)
        compare_keys(self, "strata-controller --print-config", self.documented(),
                     printed_keys(printed))
        compare_defaults(self, config_tables(self.PAGE), printed)


class Metrics(unittest.TestCase):
    def test_metrics_table_matches_the_code(self):
        defined = set()
        for source in sorted((REPO / "daemon").glob("*.cc")):
            if source.name.endswith("_test.cc"):
                continue
            defined |= set(re.findall(r'"(strata_[a-z0-9_{}]+)"', source.read_text()))
        defined = {re.sub(r"\{\}", "<tier>", name) for name in defined}
        rows = table_rows(section_lines(DOCS / "operations.md", r"Metrics"))
        documented = {backticked(r[0]) for r in rows if backticked(r[0])}
        self.assertGreater(len(defined), 20, "found almost no metric names in daemon/")
        self.assertEqual(sorted(documented - defined), [], "documented, not defined")
        self.assertEqual(sorted(defined - documented), [], "defined, not documented")


class Links(unittest.TestCase):
    def test_links_and_anchors_resolve(self):
        problems = []
        for page in PAGES:
            for number, line in split_fences(page)[0]:
                for target in re.findall(r"\]\(([^)\s]+)\)", line):
                    if re.match(r"[a-z]+:", target):
                        continue
                    path_part, _, anchor = target.partition("#")
                    path = (page.parent / path_part).resolve() if path_part else page
                    where = f"{page.relative_to(REPO)}:{number}"
                    if not path.exists():
                        problems.append(f"{where}: {target} does not exist")
                    elif REPO not in path.parents and path != REPO:
                        problems.append(f"{where}: {target} lies outside the repository")
                    elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                        problems.append(f"{where}: {target}: no heading #{anchor} there")
        self.assertFalse(problems, "\n".join(problems))

    def test_repository_paths_exist(self):
        problems = []
        for page in PAGES:
            for number, line in split_fences(page)[0]:
                for text in re.findall(r"`([^`\s]+)`", line):
                    text = text.rstrip(".,:;")
                    if (is_placeholder(text) or "*" in text or "{" in text or "://" in text
                            or "/" not in text or text.startswith(DOC_BUILD_PREFIX)):
                        continue
                    if text.split("/")[0] in TOP_DIRS and not (REPO / text).exists():
                        problems.append(f"{page.relative_to(REPO)}:{number}: `{text}` does not exist")
        self.assertFalse(problems, "\n".join(problems))

    def test_build_paths_name_targets(self):
        if not BUILD.is_dir():
            self.skipTest(f"no build tree at {BUILD}")
        cmake = "\n".join(p.read_text() for p in REPO.rglob("CMakeLists.txt")
                          if "build" not in p.relative_to(REPO).parts[:1])
        problems, missing = [], []
        for page in PAGES:
            text = page.read_text()
            for path in set(re.findall(rf"{re.escape(DOC_BUILD_PREFIX)}[\w./-]*[\w]", text)):
                relative = path[len(DOC_BUILD_PREFIX):]
                if (BUILD / relative).exists():
                    continue
                name = os.path.basename(relative)
                if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", cmake):
                    missing.append(path)
                else:
                    problems.append(f"{page.relative_to(REPO)}: {path}: no such build target")
        self.assertFalse(problems, "\n".join(problems))
        if missing:
            self.skipTest(f"not built: {sorted(set(missing))}")

    def test_architecture_picture_matches_its_source(self):
        source = (DOCS / "architecture.dot").read_text()
        picture = DOCS / "architecture.svg"
        self.assertTrue(picture.exists(), "run: dot -Tsvg docs/architecture.dot -o docs/architecture.svg")
        drawn = {html.unescape(t).strip()
                 for t in re.findall(r"<text[^>]*>([^<]*)</text>", picture.read_text())}
        labels = [part.strip() for label in re.findall(r'label="([^"]*)"', source)
                  for part in label.split("\\n") if part.strip()]
        stale = [label for label in labels if label not in drawn]
        self.assertFalse(stale, "docs/architecture.svg lacks these labels of architecture.dot; "
                         f"regenerate it (dot -Tsvg docs/architecture.dot -o docs/architecture.svg): {stale}")

    def test_no_work_history(self):
        problems = []
        for page in PAGES:
            for number, line in enumerate(page.read_text().splitlines(), 1):
                for pattern in WORK_HISTORY:
                    for match in re.finditer(pattern, line, re.I):
                        problems.append(f"{page.relative_to(REPO)}:{number}: {match.group(0)!r}")
        self.assertFalse(problems, "pages tell what the project is, does and measured, not how the "
                         "work was organised:\n" + "\n".join(problems))


CASES = (Commands, DaemonConfig, ControllerConfig, Metrics, Links)


if __name__ == "__main__":
    sys.exit(python_cases.main(sys.argv, __file__, sys.modules[__name__], CASES))
