"""The conversations generative requests carry, built on the client's node before any trial is timed: synthetic
prompts of set token lengths (fixed or drawn: uniform, normal, lognormal; seeded), a user's JSONL of conversations
(OpenAI messages, or the ShareGPT layout), multi-turn chats that resend their growing prefix, or the small corpus that
ships with tierbench (`corpus/conversations.jsonl`). Token lengths are the model's own tokenizer's (a local folder,
`serving.workloads.generative.tokenizer`); nothing is fetched.

Each request carries both forms: `messages` for /v1/chat/completions, and `text` for /v1/completions, the same
conversation as `role: content` lines ending in `assistant:` (`tokenizer.plain_text`: a model-neutral rendering, since
a completions endpoint applies no template). `input_tokens` counts the chat form, template applied, as a chat server
counts it; the server's usage says what the plain text cost."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from serving.workloads.generative import lengths  # the module: lengths.py imports this one back
from serving.workloads.generative.tokenizer import load_tokenizer, plain_text

if TYPE_CHECKING:
    from serving.workloads.generative.tokenizer import LocalTokenizer

log = logging.getLogger(__name__)

SYNTHETIC = "synthetic"  # generated text of the drawn lengths
SHIPPED = "corpus"  # the conversations that ship with tierbench
DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal")
LAYOUTS = ("auto", "openai", "sharegpt")


@dataclass(frozen=True)
class LengthSpec:
    """A token length, fixed or drawn per request (seeded). `spread`: uniform, the half-width; normal and lognormal,
    the standard deviation of the lengths, in tokens. Draws are clipped to [low, high]."""

    mean: float = 128.0
    distribution: str = "fixed"  # fixed | uniform | normal | lognormal
    spread: float = 0.0
    low: int = 1
    high: int | None = None


@dataclass(frozen=True)
class PromptSource:
    """Where the conversations come from and their lengths (hashable: it crosses Ray and names cached pools)."""

    source: str = SYNTHETIC  # synthetic | corpus | the path of a JSONL file on the clients' node
    layout: str = "auto"  # a JSONL's layout: openai ({"messages": [...]}) | sharegpt ({"conversations": [...]}) | auto
    input_tokens: LengthSpec = field(default_factory=LengthSpec)  # synthetic: each user turn's length
    output_tokens: LengthSpec = field(default_factory=lambda: LengthSpec(mean=64.0))  # max_tokens of each request
    turns: int = 1  # synthetic: user turns per conversation (> 1: each turn resends the conversation so far)
    conversations: int = 256  # distinct conversations in the pool
    seed: int = 0
    tokenizer: str | None = None  # the model's tokenizer folder (null: lengths approximate, counted by the server)
    context_tokens: int | None = None  # the model's context length (null: unchecked)
    repeated: bool = False  # every request the same (the caching audit's twin)


@dataclass(frozen=True)
class Prompt:
    """One request: the conversation so far (chat) or its text (completions), how long it is, how much to answer."""

    messages: tuple[tuple[str, str], ...]  # (role, content), the last a user turn
    text: str  # the prompt of /v1/completions: the conversation as one text
    input_tokens: int  # by the tokenizer (chat: with the chat template applied); -1 without one
    max_tokens: int  # the output length asked for
    conversation: int = 0
    turn: int = 0


# --- loading conversations ------------------------------------------------------------------------------------------

KEY = "experiment.prompts"  # where the source is configured (error messages name its keys)
CORPUS = Path(__file__).parent / "corpus" / "conversations.jsonl"
ROLES = {"system": "system", "user": "user", "assistant": "assistant"}  # openai: the roles a chat server takes
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
CHARS_PER_TOKEN = 4  # without a tokenizer: English text's usual ratio, so synthetic lengths are roughly right
LINE_FIX = ('each line is one conversation: {"messages": [{"role": "user", "content": "..."}, ...]} (openai) or '
            '{"conversations": [{"from": "human", "value": "..."}, ...]} (sharegpt)')

Conversation = tuple[tuple[str, str], ...]  # (role, content) pairs: system, user, assistant


class PromptError(ValueError):
    """The prompts cannot be built: the message names the file and line, or the config key, and the fix."""


def load_conversations(path: str | Path, layout: str = "auto") -> list[Conversation]:
    """The conversations of a JSONL file, one per line (blank lines skipped), as (role, content) pairs. `layout`:
    openai ({"messages": [{"role", "content"}]}), sharegpt ({"conversations": [{"from", "value"}]}, from human, gpt
    or system), or auto (per line, by which key is there). Raises PromptError naming the file, the line and the fix."""
    if layout not in LAYOUTS:
        raise PromptError(f"{KEY}.layout={layout!r} is not allowed: one of {', '.join(LAYOUTS)}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise PromptError(f"{KEY}.source={str(path)!r}: cannot read it ({type(error).__name__}: {error}): give a "
                          f"UTF-8 JSONL file of conversations on the clients' node, {SHIPPED!r} (the conversations "
                          f"that ship with tierbench) or {SYNTHETIC!r}") from error
    conversations = [_conversation(line, layout, f"{path}:{number}")
                     for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not conversations:
        raise PromptError(f"{path}: no conversations (the file is empty): {LINE_FIX}")
    return conversations


def _conversation(line: str, layout: str, where: str) -> Conversation:
    """One line's conversation; `where` is file:line."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise PromptError(f"{where}: not JSON ({error.msg} at column {error.colno}): {LINE_FIX}") from error
    if not isinstance(record, dict):
        raise PromptError(f"{where}: a JSON {type(record).__name__}, not an object: {LINE_FIX}")
    if layout == "auto":
        layout = "openai" if "messages" in record else "sharegpt" if "conversations" in record else ""
        if not layout:
            raise PromptError(f"{where}: neither 'messages' nor 'conversations' in it (keys: "
                              f"{', '.join(map(str, record)) or 'none'}): {LINE_FIX}")
    turns_key, role_key, content_key, roles = (("messages", "role", "content", ROLES) if layout == "openai" else
                                               ("conversations", "from", "value", SHAREGPT_ROLES))
    turns = record.get(turns_key)
    if not isinstance(turns, list) or not turns:
        raise PromptError(f"{where}: no {turns_key!r} list of messages ({KEY}.layout={layout}): {LINE_FIX}")
    messages = []
    for number, turn in enumerate(turns, start=1):
        if not isinstance(turn, dict):
            raise PromptError(f"{where}: message {number} is a JSON {type(turn).__name__}, not an object with "
                              f"{role_key!r} and {content_key!r}: {LINE_FIX}")
        given = turn.get(role_key)
        role = roles.get(given) if isinstance(given, str) else None
        if role is None:
            raise PromptError(f"{where}: message {number} has {role_key}={given!r}: give one of "
                              f"{', '.join(roles)} ({layout} layout)")
        content = turn.get(content_key)
        if not isinstance(content, str):
            raise PromptError(f"{where}: message {number}'s {content_key!r} is {type(content).__name__}, not a "
                              "string: give the text as a string (content parts, images and tool calls are not "
                              "sent)")
        messages.append((role, content))
    if not any(role == "user" for role, _ in messages):
        user = "'user'" if layout == "openai" else "'human'"
        raise PromptError(f"{where}: no user turn: a conversation needs a {role_key}={user} message to send")
    return tuple(messages)


# --- the pool -------------------------------------------------------------------------------------------------------

def check_source(source: PromptSource, key: str = KEY) -> list[str]:
    """What is wrong with `source` that can be seen without its files (empty: nothing), each problem naming the key
    under `key`, the value and the fix. A JSONL's own problems show when it is loaded, on the clients' node."""
    problems = lengths.check_length(source.input_tokens, f"{key}.input_tokens")
    problems += lengths.check_length(source.output_tokens, f"{key}.output_tokens")
    if not source.source:
        problems.append(f"{key}.source is empty: give {SYNTHETIC!r}, {SHIPPED!r} or the path of a JSONL file")
    if source.layout not in LAYOUTS:
        problems.append(f"{key}.layout={source.layout!r} is not allowed: one of {', '.join(LAYOUTS)}")
    if source.turns < 1:
        problems.append(f"{key}.turns={source.turns!r}: give 1 or more user turns per conversation")
    if source.conversations < 1:
        problems.append(f"{key}.conversations={source.conversations!r}: give 1 or more")
    if source.context_tokens is not None and source.context_tokens < 1:
        problems.append(f"{key}.context_tokens={source.context_tokens!r}: give the model's context length in "
                        "tokens, or null to take it from the tokenizer's folder")
    return problems


def prompt_pool(source: PromptSource, limit: int | None = None) -> list[Prompt]:
    """The distinct requests of `source`, in order, the same on every node (seeded): synthetic conversations, or
    one request per user turn of a JSONL's (or the shipped corpus's) conversations, each carrying the conversation so
    far. `limit`: at most that many requests; `source.repeated`: the first request only. Cached per (source, limit).
    Raises PromptError (or TokenizerError) saying what to change, including when a request would not fit the model's
    context (`context_problem`)."""
    if limit is not None and limit < 1:
        raise PromptError(f"limit={limit!r}: give 1 or more requests, or None for the whole pool")
    return list(_pool(source, 1 if source.repeated else limit))


@lru_cache(maxsize=8)
def _pool(source: PromptSource, limit: int | None) -> tuple[Prompt, ...]:
    problems = check_source(source)
    if problems:
        raise PromptError("; ".join(problems))
    tokenizer = load_tokenizer(source.tokenizer) if source.tokenizer else None
    rng = np.random.default_rng(source.seed)
    if source.source == SYNTHETIC:
        pool = _synthetic(source, tokenizer, rng, limit)
    else:
        path = CORPUS if source.source == SHIPPED else Path(source.source).expanduser()
        layout = "openai" if source.source == SHIPPED else source.layout
        pool = _from_conversations(load_conversations(path, layout)[:source.conversations], source, tokenizer, rng,
                                   limit)
    context = source.context_tokens or (tokenizer.context_tokens if tokenizer else None)
    problem = context_problem(pool, context)
    if problem:
        raise PromptError(problem)
    log.info("%d prompts from %s (%s)", len(pool), source.source, tokenizer or "no tokenizer: lengths approximate")
    return tuple(pool)


def _prompt(messages: list[tuple[str, str]], tokenizer: LocalTokenizer | None, max_tokens: int, conversation: int,
            turn: int) -> Prompt:
    return Prompt(messages=tuple(messages), text=plain_text(messages),
                  input_tokens=tokenizer.chat_count(messages) if tokenizer else -1, max_tokens=int(max_tokens),
                  conversation=conversation, turn=turn)


def _from_conversations(conversations: list[Conversation], source: PromptSource, tokenizer: LocalTokenizer | None,
                        rng: np.random.Generator, limit: int | None) -> list[Prompt]:
    """One request per user turn: the conversation up to and including it (its earlier answers as the file has
    them), max_tokens drawn from `source.output_tokens`."""
    total = sum(role == "user" for conversation in conversations for role, _ in conversation)
    max_tokens = iter(lengths.draw_lengths(source.output_tokens, total, rng, f"{KEY}.output_tokens"))
    pool: list[Prompt] = []
    for index, conversation in enumerate(conversations):
        turn = 0
        for end, (role, _) in enumerate(conversation, start=1):
            if role != "user":
                continue
            if limit is not None and len(pool) >= limit:
                return pool
            pool.append(_prompt(list(conversation[:end]), tokenizer, next(max_tokens), index, turn))
            turn += 1
    return pool


def _synthetic(source: PromptSource, tokenizer: LocalTokenizer | None, rng: np.random.Generator,
               limit: int | None) -> list[Prompt]:
    """`source.conversations` conversations of `source.turns` user turns of drawn lengths; each turn resends the
    conversation so far, with a synthetic answer of the length the previous request asked for."""
    count = source.conversations * source.turns
    inputs = lengths.draw_lengths(source.input_tokens, count, rng, f"{KEY}.input_tokens")
    outputs = lengths.draw_lengths(source.output_tokens, count, rng, f"{KEY}.output_tokens")
    seen: set[str] = set()
    pool: list[Prompt] = []
    for index in range(source.conversations):
        messages: list[tuple[str, str]] = []
        for turn in range(source.turns):
            if limit is not None and len(pool) >= limit:
                return pool
            at = index * source.turns + turn
            messages.append(("user", _distinct_text(rng, int(inputs[at]), tokenizer, seen)))
            pool.append(_prompt(messages, tokenizer, outputs[at], index, turn))
            messages.append(("assistant", _text(rng, int(outputs[at]), tokenizer)))
    return pool


# --- synthetic text -------------------------------------------------------------------------------------------------

# Everyday and technical English, in random order: no two prompts share more than a word or two of prefix, so neither
# a prefix cache nor an answer cache sees the same text twice (only a multi-turn conversation resends its own).
WORDS = tuple("""
account address after again agent allow almost answer apple april area argue around article average away balance
bank basic battery before begin behind below better between bicycle billing blue board bottle branch bridge bright
budget buffer build button cache calendar camera capital careful carry castle central change chapter cheap check
choose circle city clean client close cloud coffee column common compare compile config copy corner count country
course create credit cursor customer daily data debug decide deliver design detail device dinner direct document
double draft driver during early easy edit effect email engine enough error evening event exact example export
factor family feature field figure file filter final finish first floor follow forest format forward friend future
garden gather gentle global graph green group guide handle happy harbor header health heavy history holiday hotel
house image import index inside invoice island issue kernel kitchen label language large later layer learn letter
library light limit linear list little local logic lunch machine manual market matrix meeting memory message method
middle minute mobile model module monday month morning mountain network night normal notice number object ocean
office order output owner packet page paper parent parse patch people period picture planet please pocket policy
portal power price print private problem process product profile project prompt proper public query quick quiet
random range reason record region release report request result review river route sample schedule schema screen
search season second secure select server session shadow share simple single sketch socket software source spring
square stable station status storage stream street string summer summary support system table target teacher
template tensor test thread ticket timer today token total train travel update upload useful valley value vector
version village visit water weather window winter worker yellow yesterday
""".split())


def _words(rng: np.random.Generator, chars: int) -> str:
    """At least `chars` characters of sentences of random words."""
    sentences: list[str] = []
    total = 0
    while total < chars:
        picks = [WORDS[i] for i in rng.integers(0, len(WORDS), int(rng.integers(6, 15)))]
        sentence = " ".join(picks).capitalize() + ("?" if rng.random() < 0.15 else ".")
        sentences.append(sentence)
        total += len(sentence) + 1
    return " ".join(sentences)


def _text(rng: np.random.Generator, tokens: int, tokenizer: LocalTokenizer | None) -> str:
    """Text of `tokens` tokens: exactly, by the tokenizer, where its merges allow (cut the token ids, decode, and
    check the text re-encodes to that many), with no space at either end (chat templates often trim it, which would
    change the count); without a tokenizer, about CHARS_PER_TOKEN characters a token."""
    if tokenizer is None:
        return _words(rng, CHARS_PER_TOKEN * tokens)[:CHARS_PER_TOKEN * tokens].strip()
    best, best_miss = "", (tokens, True)
    for _ in range(4):  # a cut that lands on a space: other words, another cut
        text = _words(rng, 6 * tokens + 32)
        ids = tokenizer.encode(text)
        while len(ids) < tokens + 8:  # a tokenizer of long tokens: add sentences until the cut has room
            text += " " + _words(rng, 6 * tokens + 32)
            ids = tokenizer.encode(text)
        for shift in (0, -1, 1, -2, 2, -3, 3):
            if tokens + shift < 1:
                continue
            candidate = tokenizer.decode(ids[:tokens + shift])
            miss = (abs(tokenizer.count(candidate) - tokens), candidate != candidate.strip())
            if miss == (0, False):
                return candidate
            if miss < best_miss:
                best, best_miss = candidate, miss
    return best


def _distinct_text(rng: np.random.Generator, tokens: int, tokenizer: LocalTokenizer | None, seen: set[str]) -> str:
    """`_text`, drawn again (a few times) when the pool already has that text: only very short ones ever repeat."""
    for _ in range(8):
        text = _text(rng, tokens, tokenizer)
        if text not in seen:
            break
    seen.add(text)
    return text


# --- checks and figures ---------------------------------------------------------------------------------------------

def context_problem(pool: list[Prompt] | tuple[Prompt, ...], context_tokens: int | None, key: str = KEY) -> str | None:
    """Why requests of `pool` would not fit the model's context (input + max_tokens > `context_tokens`), or None
    (all fit, or the context is unknown). Validation calls it before anything starts; `prompt_pool` raises it."""
    if not context_tokens:
        return None
    over = [prompt for prompt in pool if max(prompt.input_tokens, 0) + prompt.max_tokens > context_tokens]
    if not over:
        return None
    longest = max(over, key=lambda prompt: max(prompt.input_tokens, 0) + prompt.max_tokens)
    need = (f"{longest.input_tokens} + {longest.max_tokens} = {longest.input_tokens + longest.max_tokens}"
            if longest.input_tokens >= 0 else f"max_tokens {longest.max_tokens} alone, input unknown without a "
            "tokenizer")
    return (f"{len(over)} of {len(pool)} prompts ask for more than the model's context of {context_tokens} tokens "
            f"(input + max_tokens; the longest, conversation {longest.conversation} turn {longest.turn + 1}: "
            f"{need}): lower {key}.input_tokens or {key}.output_tokens (their mean, spread or high), use fewer "
            f"{key}.turns or shorter conversations, or serve a model with a longer context")


def _figures(name: str, values: list[int]) -> dict[str, float]:
    array = np.asarray(values, dtype=np.float64)
    return {f"pool_{name}_mean": float(array.mean()), f"pool_{name}_p50": float(np.median(array)),
            f"pool_{name}_min": float(array.min()), f"pool_{name}_max": float(array.max())}


def pool_stats(pool: list[Prompt] | tuple[Prompt, ...]) -> dict[str, float]:
    """The pool's own figures for the run folder and MLflow (prefixed `pool_`, apart from what the server reports):
    prompts, conversations, input tokens (when a tokenizer counted them), max_tokens, the most user turns."""
    if not pool:
        return {"pool_prompts": 0.0}
    stats = {"pool_prompts": float(len(pool)),
             "pool_conversations": float(len({prompt.conversation for prompt in pool})),
             "pool_turns_max": float(max(prompt.turn for prompt in pool) + 1)}
    if all(prompt.input_tokens >= 0 for prompt in pool):
        stats |= _figures("input_tokens", [prompt.input_tokens for prompt in pool])
    return stats | _figures("max_tokens", [prompt.max_tokens for prompt in pool])
