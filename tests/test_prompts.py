"""The generative workload's inputs: length draws, the local tokenizer, conversation files (OpenAI and ShareGPT), the
shipped corpus, synthetic pools of exact lengths, and the errors that name the key, the file and the fix. No server:
the tiny Llama's one-token-per-character tokenizer, written once for the module."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from serving.workloads.generative import prompts as prompts_module
from serving.workloads.generative.lengths import check_length, draw_lengths
from serving.workloads.generative.prompts import (
    CORPUS,
    SHIPPED,
    LengthSpec,
    Prompt,
    PromptError,
    PromptSource,
    check_source,
    context_problem,
    load_conversations,
    pool_stats,
    prompt_pool,
)
from serving.workloads.generative.tiny_model import CONTEXT_TOKENS
from serving.workloads.generative.tokenizer import LocalTokenizer, TokenizerError, load_tokenizer, plain_text

SHAREGPT = Path(__file__).parent / "data" / "sharegpt_conversations.jsonl"
KEY = "experiment.prompts.input_tokens"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from serving.workloads.generative.tiny_model import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def tokenizer(tiny: Path) -> LocalTokenizer:
    return load_tokenizer(tiny)


def copy_tokenizer(tiny: Path, to: Path, *, config: bool = True, template: bool = True) -> Path:
    """The tiny tokenizer's files in a folder of their own (optionally without config.json or the chat template)."""
    to.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny / name, to / name)
    if config:
        shutil.copy(tiny / "config.json", to / "config.json")
    if template:
        shutil.copy(tiny / "chat_template.jinja", to / "chat_template.jinja")
    return to


def write_jsonl(path: Path, lines: list[object | str]) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


# --- lengths --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("distribution, std", [("uniform", 60 / np.sqrt(3)), ("normal", 60.0), ("lognormal", 60.0)])
def test_draws_have_the_mean_and_spread_asked(distribution: str, std: float) -> None:
    spec = LengthSpec(mean=300, distribution=distribution, spread=60)
    drawn = draw_lengths(spec, 100_000, np.random.default_rng(0))
    assert drawn.dtype == np.int64
    assert drawn.mean() == pytest.approx(300, rel=0.01)
    assert drawn.std() == pytest.approx(std, rel=0.02)
    if distribution == "uniform":
        assert drawn.min() >= 240 and drawn.max() <= 360
    if distribution == "lognormal":  # skewed right: the median below the mean
        assert np.median(drawn) < 300


def test_fixed_draws_one_length_and_draws_are_seeded() -> None:
    assert set(draw_lengths(LengthSpec(mean=127.6), 50, np.random.default_rng(0))) == {128}
    spec = LengthSpec(mean=100, distribution="normal", spread=30)
    first = draw_lengths(spec, 20, np.random.default_rng(7))
    assert (first == draw_lengths(spec, 20, np.random.default_rng(7))).all()
    assert (first != draw_lengths(spec, 20, np.random.default_rng(8))).any()


def test_draws_are_clipped_to_low_and_high() -> None:
    spec = LengthSpec(mean=100, distribution="normal", spread=200, low=10, high=150)
    drawn = draw_lengths(spec, 10_000, np.random.default_rng(0))
    assert drawn.min() == 10 and drawn.max() == 150


@pytest.mark.parametrize("spec, fragment", [
    (LengthSpec(distribution="beta"), f"{KEY}.distribution='beta' is not allowed: one of fixed, uniform, normal, "
                                      "lognormal"),
    (LengthSpec(mean=0.5), f"{KEY}.mean=0.5 is below 1"),
    (LengthSpec(distribution="normal", spread=-1), f"{KEY}.spread=-1 is negative"),
    (LengthSpec(spread=10), f"{KEY}.spread=10 with distribution 'fixed': set spread to 0"),
    (LengthSpec(mean=20, low=30, high=10), f"{KEY}.high=10 is below {KEY}.low=30"),
    (LengthSpec(mean=200, high=100), f"{KEY}.mean=200 is outside [low, high] = [1, 100]"),
    (LengthSpec(low=0), f"{KEY}.low=0 is below 1"),
])
def test_check_length_names_the_key_and_the_fix(spec: LengthSpec, fragment: str) -> None:
    problems = check_length(spec, KEY)
    assert any(fragment in problem for problem in problems), problems
    with pytest.raises(ValueError, match="experiment.prompts"):
        draw_lengths(spec, 1, np.random.default_rng(0), KEY)


def test_good_lengths_have_no_problems() -> None:
    for spec in (LengthSpec(), LengthSpec(mean=500, distribution="lognormal", spread=300, low=16, high=4000)):
        assert check_length(spec, KEY) == []
    assert check_source(PromptSource()) == []


def test_check_source_names_its_keys() -> None:
    problems = "; ".join(check_source(PromptSource(layout="csv", turns=0, conversations=0, context_tokens=0,
                                                   output_tokens=LengthSpec(mean=0))))
    for fragment in ("experiment.prompts.layout='csv'", "experiment.prompts.turns=0",
                     "experiment.prompts.conversations=0", "experiment.prompts.context_tokens=0",
                     "experiment.prompts.output_tokens.mean=0"):
        assert fragment in problems
    with pytest.raises(PromptError, match="experiment.prompts.turns=0"):
        prompt_pool(PromptSource(turns=0))


# --- the tokenizer --------------------------------------------------------------------------------------------------

def test_tokenizer_counts_as_a_chat_server_does(tokenizer: LocalTokenizer, tiny: Path) -> None:
    from transformers import AutoTokenizer

    assert tokenizer.count("hello") == 5 and tokenizer.name == tiny.name
    assert tokenizer.decode(tokenizer.encode("Hello, world.")) == "Hello, world."
    messages = [("system", "Be brief."), ("user", "hello")]
    assert tokenizer.has_chat_template
    assert tokenizer.render(messages) == "system: Be brief.\nuser: hello\nassistant: "
    hf = AutoTokenizer.from_pretrained(tiny, local_files_only=True)
    served = hf.apply_chat_template([{"role": r, "content": c} for r, c in messages], add_generation_prompt=True,
                                    tokenize=True)["input_ids"]
    assert tokenizer.chat_count(messages) == len(served) == len("system: Be brief.\nuser: hello\nassistant: ")
    assert tokenizer.chat_count([{"role": "user", "content": "hi"}]) == len("user: hi\nassistant: ")
    assert load_tokenizer(str(tiny)) is tokenizer  # loaded once per folder


def test_tokenizer_without_a_chat_template_counts_the_plain_text(tiny: Path, tmp_path: Path) -> None:
    bare = load_tokenizer(copy_tokenizer(tiny, tmp_path / "bare", template=False))
    assert not bare.has_chat_template
    assert bare.chat_count([("user", "hi")]) == len(plain_text([("user", "hi")])) == len("user: hi\nassistant:")


def test_context_tokens_from_config_then_tokenizer(tiny: Path, tmp_path: Path) -> None:
    assert load_tokenizer(tiny).context_tokens == CONTEXT_TOKENS
    nested = copy_tokenizer(tiny, tmp_path / "nested")
    (nested / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": 1024}}))
    assert load_tokenizer(nested).context_tokens == 1024
    assert load_tokenizer(copy_tokenizer(tiny, tmp_path / "no-config", config=False)).context_tokens == CONTEXT_TOKENS
    unknown = copy_tokenizer(tiny, tmp_path / "unknown", config=False)
    settings = json.loads((unknown / "tokenizer_config.json").read_text())
    settings["model_max_length"] = int(1e30)  # what transformers writes when it does not know
    (unknown / "tokenizer_config.json").write_text(json.dumps(settings))
    assert load_tokenizer(unknown).context_tokens is None


def test_tokenizer_errors_name_the_folder_and_the_fix(tiny: Path, tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(TokenizerError, match=f"model.tokenizer='{missing}': no such folder") as error:
        load_tokenizer(missing)
    assert "save_pretrained, or null" in str(error.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TokenizerError, match="no tokenizer there \\(no tokenizer.json or tokenizer_config.json\\)"):
        load_tokenizer(tmp_path / "empty")
    (tmp_path / "file").write_text("x")
    with pytest.raises(TokenizerError, match="not a folder"):
        load_tokenizer(tmp_path / "file")
    broken = copy_tokenizer(tiny, tmp_path / "broken")
    (broken / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match=f"'{broken}': the tokenizer does not load"):
        load_tokenizer(broken)
    with pytest.raises(TokenizerError, match="no such folder"):  # the pool says it too
        prompt_pool(PromptSource(tokenizer=str(missing)))


@pytest.mark.slow
def test_importing_prompts_does_not_import_transformers() -> None:
    code = ("import sys, serving.workloads.generative.prompts, serving.workloads.generative.lengths; "
            "assert 'transformers' not in sys.modules, 'transformers imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)


# --- conversation files ---------------------------------------------------------------------------------------------

def test_every_shipped_conversation_parses() -> None:
    conversations = load_conversations(CORPUS, "openai")
    assert len(conversations) >= 60
    assert sum(sum(role == "user" for role, _ in c) > 1 for c in conversations) >= 5  # multi-turn ones
    assert sum(c[0][0] == "system" for c in conversations) >= 5
    assert all(content.strip() for c in conversations for _, content in c)
    sizes = sorted(sum(len(content) for _, content in c) for c in conversations)
    assert sizes[0] < 100 and sizes[-1] > 1000  # one-line questions to multi-paragraph requests
    assert len({c for c in conversations}) == len(conversations)


def test_openai_sharegpt_and_mixed_files_load(tmp_path: Path) -> None:
    openai = write_jsonl(tmp_path / "openai.jsonl", [
        {"messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]},
        "",
        {"messages": [{"role": "user", "content": "Alone"}], "id": 3},
    ])
    assert load_conversations(openai, "openai") == [
        (("system", "Be kind."), ("user", "Hi"), ("assistant", "Hello!"), ("user", "Bye")), (("user", "Alone"),)]
    shared = load_conversations(SHAREGPT, "sharegpt")
    assert shared == load_conversations(SHAREGPT)  # auto: decided by the key
    assert shared[1] == (("system", "Answer briefly."), ("user", "Name a prime number above 20."),
                         ("assistant", "23."), ("user", "And one above 50?"))
    mixed = write_jsonl(tmp_path / "mixed.jsonl", [openai.read_text().splitlines()[0],
                                                   SHAREGPT.read_text().splitlines()[0]])
    assert [len(c) for c in load_conversations(mixed)] == [4, 2]


@pytest.mark.parametrize("line, fragments", [
    ("{not json", [":2: not JSON", "each line is one conversation"]),
    ("[1, 2]", [":2: a JSON list, not an object"]),
    ({"prompt": "hi"}, [":2: neither 'messages' nor 'conversations'", "keys: prompt"]),
    ({"messages": []}, [":2: no 'messages' list"]),
    ({"messages": [{"role": "assistant", "content": "only me"}]}, [":2: no user turn", "role='user'"]),
    ({"messages": [{"role": "robot", "content": "x"}]}, [":2: message 1 has role='robot'", "system, user, assistant"]),
    ({"messages": [{"role": ["user"], "content": "x"}]}, [":2: message 1 has role=['user']"]),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
     [":2: message 1's 'content' is list, not a string"]),
    ({"conversations": [{"from": "bard", "value": "x"}]}, [":2: message 1 has from='bard'", "human, user, gpt"]),
    ({"conversations": [{"from": "human", "value": 7}]}, [":2: message 1's 'value' is int"]),
    ({"conversations": [{"from": "gpt", "value": "x"}]}, [":2: no user turn", "from='human'"]),
])
def test_bad_lines_are_refused_naming_file_and_line(tmp_path: Path, line: object, fragments: list[str]) -> None:
    path = write_jsonl(tmp_path / "talks.jsonl", [{"messages": [{"role": "user", "content": "fine"}]}, line])
    with pytest.raises(PromptError) as error:
        load_conversations(path)
    assert str(path) in str(error.value)
    for fragment in fragments:
        assert fragment in str(error.value)


def test_layout_is_enforced_when_given(tmp_path: Path) -> None:
    with pytest.raises(PromptError, match=":1: no 'messages' list .*layout=openai"):
        load_conversations(SHAREGPT, "openai")
    with pytest.raises(PromptError, match="experiment.prompts.layout='csv' is not allowed"):
        load_conversations(SHAREGPT, "csv")


def test_unreadable_and_empty_files_are_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(PromptError, match=f"experiment.prompts.source='{missing}': cannot read it"):
        load_conversations(missing)
    with pytest.raises(PromptError, match="cannot read it .*'corpus'"):
        prompt_pool(PromptSource(source=str(missing)))
    empty = write_jsonl(tmp_path / "empty.jsonl", ["", "  "])
    with pytest.raises(PromptError, match=f"{empty}: no conversations \\(the file is empty\\)"):
        load_conversations(empty)
    (tmp_path / "latin1.jsonl").write_bytes(b'{"messages": [{"role": "user", "content": "caf\xe9"}]}\n')
    with pytest.raises(PromptError, match="UnicodeDecodeError"):
        load_conversations(tmp_path / "latin1.jsonl")


# --- pools from conversations ---------------------------------------------------------------------------------------

def test_corpus_pool_sends_each_user_turn_with_the_conversation_so_far(tokenizer: LocalTokenizer, tiny: Path) -> None:
    conversations = load_conversations(CORPUS)
    pool = prompt_pool(PromptSource(source=SHIPPED, tokenizer=str(tiny),
                                    output_tokens=LengthSpec(mean=128, distribution="uniform", spread=64)))
    assert len(pool) == sum(role == "user" for c in conversations for role, _ in c)
    for prompt in pool:
        conversation = conversations[prompt.conversation]
        assert prompt.messages == conversation[:len(prompt.messages)]
        assert prompt.messages[-1][0] == "user"
        assert sum(role == "user" for role, _ in prompt.messages) == prompt.turn + 1
        assert prompt.input_tokens == tokenizer.chat_count(prompt.messages)
        assert prompt.text == plain_text(prompt.messages) and prompt.text.endswith("\nassistant:")
        assert 64 <= prompt.max_tokens <= 192
    assert len({prompt.max_tokens for prompt in pool}) > 10


def test_jsonl_pool_caps_conversations_and_limit(tmp_path: Path) -> None:
    pool = prompt_pool(PromptSource(source=str(SHAREGPT)))
    assert [(p.conversation, p.turn) for p in pool] == [(0, 0), (1, 0), (1, 1), (2, 0)]
    assert all(p.input_tokens == -1 and p.max_tokens == 64 for p in pool)  # no tokenizer: the server counts
    assert len(prompt_pool(PromptSource(source=str(SHAREGPT), conversations=2))) == 3
    assert prompt_pool(PromptSource(source=str(SHAREGPT)), limit=2) == pool[:2]
    assert prompt_pool(PromptSource(source=str(SHAREGPT), repeated=True)) == pool[:1]
    with pytest.raises(PromptError, match="limit=0"):
        prompt_pool(PromptSource(), limit=0)


# --- synthetic pools ------------------------------------------------------------------------------------------------

def test_synthetic_turns_have_exact_lengths(tokenizer: LocalTokenizer, tiny: Path) -> None:
    source = PromptSource(tokenizer=str(tiny), conversations=40, seed=3, output_tokens=LengthSpec(mean=32),
                          input_tokens=LengthSpec(mean=200, distribution="lognormal", spread=120, low=8, high=900))
    pool = prompt_pool(source)
    assert len(pool) == 40
    sizes = [tokenizer.count(prompt.messages[-1][1]) for prompt in pool]
    expected = draw_lengths(source.input_tokens, 40, np.random.default_rng(3))  # the pool's first draws
    assert sizes == list(expected)
    for prompt in pool:
        assert prompt.input_tokens == tokenizer.chat_count(prompt.messages)
        assert prompt.messages[-1][1] == prompt.messages[-1][1].strip()
        assert prompt.max_tokens == 32


def test_exact_lengths_with_merges_across_the_cut(tmp_path: Path) -> None:
    """A byte-level BPE (GPT-2's kind: a space belongs to the next word) whose template writes the BOS and trims the
    content: lengths stay exact where merges make a cut's re-encoding differ, and the count is the server's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    texts = [content for conversation in load_conversations(CORPUS) for _, content in conversation]
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>", "<s>", "</s>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] | trim }}</s>"
                          "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    fast.save_pretrained(tmp_path / "bpe")
    bpe_tokenizer = load_tokenizer(tmp_path / "bpe")
    source = PromptSource(tokenizer=str(tmp_path / "bpe"), conversations=30, turns=2,
                          input_tokens=LengthSpec(mean=120, distribution="normal", spread=50, low=1))
    pool = prompt_pool(source)
    expected = draw_lengths(source.input_tokens, 60, np.random.default_rng(0))
    assert [bpe_tokenizer.count(prompt.messages[-1][1]) for prompt in pool] == list(expected)
    hf = AutoTokenizer.from_pretrained(tmp_path / "bpe", local_files_only=True)
    for prompt in pool[:4]:
        served = hf.apply_chat_template([{"role": r, "content": c} for r, c in prompt.messages],
                                        add_generation_prompt=True, tokenize=True)["input_ids"]
        assert prompt.input_tokens == len(served) and served[0] == hf.bos_token_id


def test_synthetic_pool_is_deterministic_and_distinct(tiny: Path) -> None:
    source = PromptSource(tokenizer=str(tiny), conversations=64, input_tokens=LengthSpec(mean=24))
    first = prompt_pool(source)
    prompts_module._pool.cache_clear()
    assert prompt_pool(source) == first  # built again, the same: every client actor builds this pool
    texts = [prompt.messages[-1][1] for prompt in first]
    assert len(set(texts)) == len(texts)
    assert len({text[:12] for text in texts}) > 56  # no shared opening for a prefix cache to reuse
    other = prompt_pool(PromptSource(tokenizer=str(tiny), conversations=64, input_tokens=LengthSpec(mean=24), seed=1))
    assert not {prompt.text for prompt in other} & {prompt.text for prompt in first}


def test_multi_turn_resends_the_growing_conversation(tokenizer: LocalTokenizer, tiny: Path) -> None:
    source = PromptSource(tokenizer=str(tiny), conversations=3, turns=4, input_tokens=LengthSpec(mean=40),
                          output_tokens=LengthSpec(mean=30, distribution="uniform", spread=10))
    pool = prompt_pool(source)
    assert [(p.conversation, p.turn) for p in pool] == [(c, t) for c in range(3) for t in range(4)]
    for before, after in zip(pool, pool[1:], strict=False):
        if after.conversation != before.conversation:
            continue
        answer, question = after.messages[len(before.messages):]
        assert after.messages[:len(before.messages)] == before.messages  # the prefix a server's cache sees
        assert answer[0] == "assistant" and tokenizer.count(answer[1]) == before.max_tokens
        assert question[0] == "user" and tokenizer.count(question[1]) == 40
        assert after.input_tokens > before.input_tokens + before.max_tokens + 40
    assert pool_stats(pool)["pool_turns_max"] == 4
    assert prompt_pool(source, limit=5) == pool[:5]
    assert prompt_pool(PromptSource(tokenizer=str(tiny), conversations=3, turns=4, input_tokens=LengthSpec(mean=40),
                                    output_tokens=source.output_tokens, repeated=True)) == pool[:1]


def test_synthetic_without_a_tokenizer_approximates(tmp_path: Path) -> None:
    pool = prompt_pool(PromptSource(conversations=5, input_tokens=LengthSpec(mean=100)))
    assert all(prompt.input_tokens == -1 for prompt in pool)
    assert all(380 <= len(prompt.messages[-1][1]) <= 400 for prompt in pool)  # about 4 characters a token
    assert "pool_input_tokens_mean" not in pool_stats(pool)


# --- the context check and the figures ------------------------------------------------------------------------------

def make_prompt(input_tokens: int, max_tokens: int, conversation: int = 0) -> Prompt:
    return Prompt(messages=(("user", "x"),), text="user: x\nassistant:", input_tokens=input_tokens,
                  max_tokens=max_tokens, conversation=conversation)


def test_context_problem_says_how_many_and_the_longest() -> None:
    pool = [make_prompt(100, 50), make_prompt(900, 200, 1), make_prompt(950, 100, 2)]
    assert context_problem(pool, None) is None
    assert context_problem(pool, 1100) is None
    problem = context_problem(pool, 1000)
    assert problem is not None
    for fragment in ("2 of 3 prompts", "context of 1000 tokens", "conversation 1 turn 1: 900 + 200 = 1100",
                     "experiment.prompts.input_tokens", "experiment.prompts.output_tokens"):
        assert fragment in problem
    assert "input unknown" in (context_problem([make_prompt(-1, 300)], 256) or "")


def test_pool_refuses_prompts_longer_than_the_context(tiny: Path) -> None:
    with pytest.raises(PromptError, match="of 4 prompts ask for more than the model's context of 2048 tokens"):
        prompt_pool(PromptSource(tokenizer=str(tiny), conversations=4, input_tokens=LengthSpec(mean=2000)))
    with pytest.raises(PromptError, match="context of 500 tokens"):  # the source's own context wins
        prompt_pool(PromptSource(tokenizer=str(tiny), conversations=4, context_tokens=500,
                                 input_tokens=LengthSpec(mean=450)))


def test_pool_stats() -> None:
    stats = pool_stats([make_prompt(10, 50), make_prompt(30, 70, 1), make_prompt(20, 60, 1)])
    assert stats == {"pool_prompts": 3.0, "pool_conversations": 2.0, "pool_turns_max": 1.0,
                     "pool_input_tokens_mean": 20.0, "pool_input_tokens_p50": 20.0, "pool_input_tokens_min": 10.0,
                     "pool_input_tokens_max": 30.0, "pool_max_tokens_mean": 60.0, "pool_max_tokens_p50": 60.0,
                     "pool_max_tokens_min": 50.0, "pool_max_tokens_max": 70.0}
    assert pool_stats([]) == {"pool_prompts": 0.0}
