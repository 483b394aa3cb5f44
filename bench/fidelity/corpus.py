"""RAG-like prompts over real English text: sections of the GNU manuals that Debian installs in
Info format under /usr/share/info (packages coreutils, grep, sed, findutils, gzip and
diffutils: each is "required" or "essential", so every Debian machine has them unless its
dpkg excludes documentation).

A passage is one manual section (an Info node): its title line and its first paragraphs of prose,
cut at a paragraph end near a token budget. A prompt is an instruction, several passages, then
a question about one of them; prompts reuse a small pool of passages in other orders, as a RAG service's prompts
reuse its retrieved documents. Everything is deterministic (a fixed seed, sorted inputs).
"""

import gzip
import pathlib
import random
import re
from dataclasses import dataclass

INFO_DIR = pathlib.Path("/usr/share/info")
MANUALS = ("coreutils.info.gz", "grep.info.gz", "sed.info.gz", "find.info.gz", "gzip.info.gz",
           "diffutils.info.gz")
PASSAGE_SEPARATOR = "\n\n"
INSTRUCTION = "Answer the question with the sections of the GNU manuals below.\n\n"


class CorpusMissing(RuntimeError):
    """The Info manuals are not installed (a documentation-free Debian image)."""


@dataclass(frozen=True)
class Passage:
    title: str
    text: str  # the title line, a blank line, then the prose


@dataclass(frozen=True)
class Prompt:
    passages: tuple[int, ...]  # indices into the passage pool, in prompt order
    question_about: int        # the passage the question asks about
    question: str


def _nodes(path):
    """(title, body) of each node of an Info file: its numbered heading and the text below."""
    for node in gzip.open(path, "rt", errors="replace").read().split("\x1f"):
        lines = node.strip("\n").split("\n")
        if not lines or not lines[0].startswith("File:") or len(lines) < 4:
            continue
        title, underline = lines[2].strip(), lines[3].strip()
        if not underline or set(underline) - set("=*-."):
            continue
        yield title, "\n".join(lines[4:])


def _prose_paragraphs(body):
    """The paragraphs of a node that are prose: no menus, examples or option lists."""
    for paragraph in re.split(r"\n\s*\n", body):
        lines = [line.strip() for line in paragraph.split("\n") if line.strip()]
        text = " ".join(lines)
        if (len(lines) < 2 or text.startswith("*") or "Menu:" in text
                or paragraph.startswith("       ") or len(text.split()) < 20):
            continue
        yield text


def passages(tokenizer, count, tokens, seed=7):
    """`count` passages of about `tokens` tokens each (at least 3/4 of it), from distinct
    sections chosen with `seed`; CorpusMissing when no manual is installed."""
    found = [INFO_DIR / name for name in MANUALS if (INFO_DIR / name).exists()]
    if not found:
        raise CorpusMissing(f"none of {', '.join(MANUALS)} is under {INFO_DIR}")
    candidates = []
    for path in found:
        for title, body in _nodes(path):
            text, used = f"{title}\n", 0
            for paragraph in _prose_paragraphs(body):
                n = len(tokenizer(" " + paragraph).input_ids)
                if used + n > tokens:
                    break
                text, used = text + "\n" + paragraph, used + n
            if used >= tokens * 3 // 4:
                candidates.append(Passage(title, text))
    if len(candidates) < count:
        raise CorpusMissing(f"only {len(candidates)} sections of {tokens * 3 // 4}+ tokens "
                            f"of prose in {', '.join(p.name for p in found)}")
    return random.Random(seed).sample(sorted(candidates, key=lambda p: p.title), count)


def rag_prompts(pool, count, per_prompt, seed=11):
    """`count` prompts of `per_prompt` passages each drawn from `pool` in a shuffled order, and
    a question about one of them."""
    rng, prompts = random.Random(seed), []
    for _ in range(count):
        chosen = rng.sample(range(len(pool)), per_prompt)
        about = rng.choice(chosen)
        question = (f"Question: According to the section \"{pool[about].title}\", what does it "
                    "describe, and when would someone use it?\nAnswer:")
        prompts.append(Prompt(tuple(chosen), about, question))
    return prompts


def prompt_tokens(prompt, pool, tokenizer):
    """(token ids, the (begin, end) token span of each passage) of INSTRUCTION, the passages
    separated by PASSAGE_SEPARATOR, the separator and the question. Each piece is tokenized
    alone, so that a passage is the same tokens wherever it stands (what position-independent
    reuse keys on)."""
    def tokens(text):
        return tokenizer(text, add_special_tokens=False).input_ids

    separator = tokens(PASSAGE_SEPARATOR)
    ids, spans = tokens(INSTRUCTION), []
    for n, index in enumerate(prompt.passages):
        if n:
            ids += separator
        passage = tokens(pool[index].text)
        spans.append((len(ids), len(ids) + len(passage)))
        ids += passage
    return ids + separator + tokens(prompt.question), spans
