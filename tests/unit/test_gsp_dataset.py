"""generated-shared-prefix generator (bench/datasets/shared_prefix.py)."""

from __future__ import annotations

from glmserve.bench.datasets.shared_prefix import (
    DEFAULTS,
    GspParams,
    conversations,
    hit_rate,
    ideal_hit_rate,
)


def test_defaults_are_sglang_bench_servings():
    # sglang 0.5.9 bench_serving.py lines 3319-3368
    assert DEFAULTS == {
        "num_groups": 64,
        "prompts_per_group": 16,
        "system_prompt_len": 2048,
        "question_len": 128,
        "output_len": 256,
        "num_turns": 1,
    }


def test_groups_share_system_prompt_and_differ_across_groups():
    p = GspParams(num_groups=3, prompts_per_group=2, system_prompt_len=8, question_len=3)
    convs = conversations(p)
    assert len(convs) == 6
    assert convs[0].system == convs[1].system != convs[2].system
    assert convs[0].prompt()[:8] == convs[1].prompt()[:8]
    assert convs[0].prompt() != convs[1].prompt()
    assert conversations(p)[5].prompt() == convs[5].prompt()  # reproducible from the seed


def test_next_turn_carries_the_real_reply():
    p = GspParams(
        num_groups=1, prompts_per_group=1, system_prompt_len=4, question_len=2, num_turns=3
    )
    conv = conversations(p)[0]
    first = conv.prompt()
    assert conv.next_turn(first, [7, 8, 9])
    second = conv.prompt()
    assert second[: len(first) + 3] == [*first, 7, 8, 9]
    assert len(second) == len(first) + 3 + 2
    assert conv.next_turn(second, [5])
    assert not conv.next_turn(conv.prompt(), [6])


def test_hit_rate_and_bad_params():
    assert hit_rate([100, 100], [0, 50]) == 0.25
    assert hit_rate([100, 100], [None, 50]) == 0.5
    assert hit_rate([100], [None]) is None
    assert GspParams(num_turns=0).check() == "--gsp-num-turns must be at least 1"
    assert GspParams().check() is None
    p = GspParams(num_groups=1, prompts_per_group=2, system_prompt_len=10, question_len=10)
    assert ideal_hit_rate(p) == 10 / 40
