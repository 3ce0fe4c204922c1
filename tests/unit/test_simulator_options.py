"""Simulator argv: SGLang flags as argparse parses them, --sim-* options, YAML overrides."""

from __future__ import annotations

import pytest

from glmserve.errors import SimUsageError
from glmserve.simulator import options

SEED_ARGV = [
    "--model",
    "lukealonso/GLM-5-NVFP4",
    "--served-model-name",
    "glm-5",
    "--reasoning-parser",
    "glm45",
    "--tool-call-parser",
    "glm47",
    "--trust-remote-code",
    "--tp-size",
    "8",
    "--mem-fraction-static",
    "0.92",
    "--max-running-requests",
    "2048",
    "--kv-cache-dtype",
    "auto",
    "--quantization",
    "modelopt_fp4",
    "--attention-backend",
    "trtllm_mla",
    "--fp8-gemm-backend",
    "cutlass",
    "--nsa-decode-backend",
    "trtllm",
    "--nsa-prefill-backend",
    "trtllm",
    "--moe-runner-backend",
    "flashinfer_cutlass",
    "--disable-cuda-graph",
    "--disable-radix-cache",
    "--num-continuous-decode-steps",
    "16",
    "--host",
    "0.0.0.0",
    "--port",
    "8000",
]


def test_reference_launch_script_parses_and_unknown_flags_are_kept():
    o = options.parse(SEED_ARGV, env={})
    assert o.server.model_path == "lukealonso/GLM-5-NVFP4"
    assert o.served_model_name == "glm-5"
    assert (o.server.host, o.server.port, o.server.tp_size) == ("0.0.0.0", 8000, 8)
    assert o.max_running_requests == 2048
    assert o.shape.attention_backend == "trtllm_mla"
    assert o.shape.kv_cache_dtype == "fp8_e4m3"  # auto -> FP8 on the seeds' box
    assert o.shape.cuda_graph is False
    assert o.shape.num_continuous_decode_steps == 16
    assert "--reasoning-parser" in o.unknown and "glm45" in o.unknown
    assert o.server.disable_radix_cache is True  # modelled: simulator/radix.py


def test_defaults_resolve_like_sglang_on_sm120():
    o = options.parse(["--model-path", "m"], env={})
    assert o.server.port == 30000
    assert o.shape.attention_backend == "nsa"  # GLM-5 is DSA: server_args.py:1211-1213
    assert o.shape.cuda_graph is True
    assert o.crash_at is None and o.hang_at is None
    for off in (["--cuda-graph-max-bs", "0"], ["--cuda-graph-backend-decode=disabled"]):
        assert options.parse(["--model-path", "m", *off], env={}).shape.cuda_graph is False


def test_sim_overrides_flags_and_yaml(tmp_path):
    cfg = tmp_path / "m.yaml"
    cfg.write_text("bandwidth_gbps: 1500\nlayers: 61\nbackend-overhead-ms: {flashinfer: 1.0}\n")
    o = options.parse(
        ["--model-path", "m", "--sim-config", str(cfg), "--sim-layers", "70", "--sim-speed=4"],
        env={},
    )
    assert o.model.bandwidth_gbps == 1500.0
    assert o.model.layers == 70  # the flag wins over the file
    assert o.model.backend_overhead_ms == {"flashinfer": 1.0}
    assert o.speed == 4.0


def test_yaml_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("layers: 61\nbandwidth_gbps: [1,\n")
    with pytest.raises(SimUsageError, match=r"bad.yaml:\d+"):
        options.parse(["--model-path", "m", "--sim-config", str(bad)], env={})
    unknown = tmp_path / "u.yaml"
    unknown.write_text("warp_speed: 9\n")
    with pytest.raises(SimUsageError, match=r"unknown field 'warp_speed'.*bandwidth_gbps"):
        options.parse(["--model-path", "m", "--sim-config", str(unknown)], env={})
    with pytest.raises(SimUsageError, match="--sim-layers"):
        options.parse(["--model-path", "m", "--sim-layers", "lots"], env={})
    with pytest.raises(SimUsageError, match="unknown simulator option --sim-warp"):
        options.parse(["--model-path", "m", "--sim-warp", "9"], env={})


def test_fault_options_resolve_natural_pairs():
    o = options.parse(["--model-path", "m", "--sim-crash-at", "after-ready:2.5"], env={})
    assert (o.crash_at, o.crash_after_s, o.crash_kind) == (
        "after-ready",
        2.5,
        "illegal_memory_access",
    )
    o = options.parse(["--model-path", "m", "--sim-crash-kind", "oom"], env={})
    assert (o.crash_at, o.crash_kind) == ("kv", "oom")
    o = options.parse(["--model-path", "m", "--sim-crash-kind", "tllm_unsupported_arch"], env={})
    assert o.crash_at == "warmup"
    o = options.parse(["--model-path", "m", "--sim-crash-kind", "no_kernel_image"], env={})
    assert o.crash_at == "graphs"
    argv = ["--model-path", "m", "--disable-cuda-graph", "--sim-crash-kind", "no_kernel_image"]
    assert options.parse(argv, env={}).crash_at == "warmup"
    with pytest.raises(SimUsageError, match="CUDA graphs are disabled"):
        options.parse(
            ["--model-path", "m", "--disable-cuda-graph", "--sim-hang-at", "graphs"], env={}
        )
    with pytest.raises(SimUsageError, match="after-ready:SECONDS"):
        options.parse(["--model-path", "m", "--sim-crash-at", "lunch"], env={})


def test_patches_come_from_the_env():
    o = options.parse(
        ["--model-path", "m"], env={"GLMSERVE_PATCHES": "flashinfer_mla_gather_cast,x"}
    )
    assert o.patches == ("flashinfer_mla_gather_cast", "x")
    assert o.shape.patches == o.patches


def test_bad_sglang_values_exit_2_like_argparse(capsys):
    with pytest.raises(SystemExit) as exc:
        options.parse(["--model-path", "m", "--kv-cache-dtype", "int3"], env={})
    assert exc.value.code == 2
    assert "argument --kv-cache-dtype: invalid choice: 'int3'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        options.parse(["--port", "1"], env={})
    assert "the following arguments are required: --model-path/--model" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sim-speed", "abc"], "argument --sim-speed: invalid float value: 'abc'"),
        (["--sim-gpu-arch", "sm7"], "argument --sim-gpu-arch: invalid choice: 'sm7'"),
        (["--sim-crash-kind=nope"], "argument --sim-crash-kind: invalid choice: 'nope'"),
    ],
)
def test_bad_sim_option_values_are_one_line_not_argparse_usage(capsys, argv, message):
    """--sim-* options are glmserve's: argparse's message as a SimUsageError, without the
    40-line usage block and sys.exit of the parser."""
    with pytest.raises(SimUsageError) as exc:
        options.parse(["--model-path", "m", *argv], env={})
    assert message in str(exc.value)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("speed", ["-1", "0", "nan", "inf"])
def test_a_speed_not_above_zero_gets_one_message(speed):
    """`--sim-speed -1` said "expected a finite number >= 0" and `--sim-speed 0` was then
    refused with another message: one rule, one message."""
    with pytest.raises(SimUsageError) as exc:
        options.parse(["--model-path", "m", "--sim-speed", speed], env={})
    assert str(exc.value) == f"--sim-speed: expected a finite number > 0, got {float(speed)!r}"


@pytest.mark.parametrize("port", ["99999", "65536", "0", "-1"])
def test_a_port_no_socket_can_bind_is_refused_before_start_up(port):
    with pytest.raises(SimUsageError, match=f"--port {port}: must be a TCP port between 1 and"):
        options.parse(["--model-path", "m", "--port", port], env={})
    assert options.parse(["--model-path", "m", "--port", "65535"], env={}).server.port == 65535


def test_simulate_verb_bad_port_and_sim_value_are_one_line_exit_2(capsys):
    """Through ``glmserve simulate``: one line naming the option, exit 2 (no start-up, no
    internal error). A bad SGLang flag value keeps argparse's usage block: SGLang's
    launch_server prints exactly that, and the simulator stands in for it."""
    from glmserve.cli import main

    for argv, line in (
        (["--port", "99999"], "glmserve simulate: error: --port 99999: must be a TCP port"),
        (["--sim-speed", "abc"], "glmserve simulate: error: argument --sim-speed: invalid"),
    ):
        assert main(["simulate", "--model-path", "m", *argv]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(line), captured.err
    assert main(["simulate", "--model-path", "m", "--port", "abc"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: launch_server.py [-h] --model-path MODEL_PATH")
    assert err.strip().endswith("error: argument --port: invalid int value: 'abc'")


def test_flags_past_the_modelled_gpu_memory_crash_with_oom_at_start():
    from glmserve.simulator import options

    base = ["--model-path", "m", "--tp-size", "8"]
    o = options.parse([*base, "--mem-fraction-static", "0.97"])
    assert (o.crash_kind, o.crash_at) == ("oom", "graphs")
    o = options.parse([*base, "--mem-fraction-static", "0.97", "--disable-cuda-graph"])
    assert (o.crash_kind, o.crash_at) == ("oom", "warmup")
    o = options.parse([*base, "--cuda-graph-max-bs", "16", "--chunked-prefill-size", "1024"])
    assert o.crash_kind is None
    assert (o.shape.cuda_graph_max_bs, o.shape.chunked_prefill_size) == (16, 1024)
    default = options.parse(base)
    assert (default.shape.cuda_graph_max_bs, default.shape.chunked_prefill_size) == (512, 8192)


def test_a_static_fraction_too_low_for_any_kv_pool_is_sglangs_own_refusal_at_kv():
    """sglang 0.5.9 model_runner_kv_cache_mixin.py:415-419: no pool left after the weights is
    "Not enough memory. Please try to increase --mem-fraction-static" at pool sizing, not a
    CUDA OOM later (an audit found the old simulator logged a 0-token pool, then an OOM whose
    hint said to lower the fraction)."""
    from glmserve.simulator import costmodel, options

    o = options.parse(["--model-path", "m", "--tp-size", "8", "--mem-fraction-static", "0.5"])
    assert costmodel.pool_tokens(o.model, o.shape) <= 0
    assert (o.crash_kind, o.crash_at) == ("kv_no_memory", "kv")


@pytest.mark.parametrize("flag", ["--sim-step-jitter", "--sim-run-variation"])
def test_a_spread_past_one_is_refused_not_a_stalled_server(flag):
    """exp(N(0, 50)) made one step last e^100 s: the server looked stalled for no stated
    reason. The spreads are relative (0.05 is about +-5%); past 1 is refused, naming the flag."""
    with pytest.raises(
        SimUsageError, match=rf"{flag}: expected a number within \[0, 1\], got 50.0"
    ):
        options.parse(["--model-path", "m", flag, "50"], env={})
    assert options.parse(["--model-path", "m", flag, "1"], env={}) is not None
