"""The protocol's environment, with and without Hadar."""

from __future__ import annotations

from pathlib import Path

import pytest

from hadar_job import EnvError, JobEnv

V1 = {
    "HADAR_PROTOCOL": "1",
    "HADAR_JOB_ID": "3",
    "HADAR_COPY": "2",
    "HADAR_ROUND": "7",
    "HADAR_ROUND_DEADLINE": "1795705812.021",
    "HADAR_TOTAL_ITERATIONS": "6000",
    "HADAR_GPU_TYPE": "v100,k80",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "HADAR_CHECKPOINT_DIR": "/state/tasks/job3-round7-copy2-l9",
    "HADAR_SEED": "15845",
    "HADAR_JOB_NAME": "resnet-a",
    "HADAR_TASK_TOKEN": "hadar123-job3-round7-copy2-l9",
}


def test_outside_hadar_every_field_has_a_default(tmp_path: Path) -> None:
    env = JobEnv.from_environ({}, total=500)
    assert not env.in_hadar
    assert env.protocol == 0
    assert (env.job_id, env.copy, env.round, env.seed) == (0, 0, 0, 0)
    assert env.deadline is None and env.seconds_to_deadline() is None
    assert env.total == 500
    assert env.checkpoint_dir == Path.cwd() / "hadar-checkpoints"
    assert env.checkpoint_dir.is_absolute()
    assert env.job_name == "job"
    assert env.gpu_types == () and env.visible_devices == ()
    assert env.task_token is None
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (0, 1, 0, 1)
    assert env.is_rank0 and not env.distributed
    assert env.batch_share == 1.0
    assert env.master_addr is None and env.master_port is None and env.node is None


def test_outside_hadar_the_script_chooses(tmp_path: Path) -> None:
    env = JobEnv.from_environ({}, total=10, checkpoint_dir=tmp_path / "ck", job_name="mine", seed=4)
    assert env.checkpoint_dir == tmp_path / "ck"
    assert env.resume_path == tmp_path / "ck" / "resume.safetensors"
    assert env.checkpoint_path == tmp_path / "ck" / "checkpoint.safetensors"
    assert (env.job_name, env.seed) == ("mine", 4)
    assert JobEnv.from_environ({}).total is None


def test_version_1() -> None:
    env = JobEnv.from_environ(V1, total=10, checkpoint_dir="/elsewhere", job_name="x", seed=9)
    assert env.in_hadar and env.protocol == 1
    assert (env.job_id, env.copy, env.round) == (3, 2, 7)
    assert env.deadline == pytest.approx(1795705812.021)
    assert env.seconds_to_deadline(now=1795705810.0) == pytest.approx(2.021)
    assert env.total == 6000, "HADAR_TOTAL_ITERATIONS wins over the script's default"
    assert env.checkpoint_dir == Path("/state/tasks/job3-round7-copy2-l9")
    assert env.seed == 15845 and env.job_name == "resnet-a"
    assert env.gpu_types == ("v100", "k80")
    assert env.visible_devices == ("0", "1")
    assert env.task_token == "hadar123-job3-round7-copy2-l9"
    assert (env.rank, env.world_size) == (0, 1)


def test_version_1_ignores_inherited_torchrun_variables() -> None:
    env = JobEnv.from_environ({**V1, "RANK": "3", "WORLD_SIZE": "4", "HADAR_BATCH_SHARE": "0.25"})
    assert (env.rank, env.world_size, env.batch_share) == (0, 1, 1.0)
    assert env.master_addr is None


def test_version_2_ranks() -> None:
    env = JobEnv.from_environ(
        {
            **V1,
            "HADAR_PROTOCOL": "2",
            "RANK": "2",
            "WORLD_SIZE": "3",
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "GROUP_RANK": "1",
            "GROUP_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29613",
            "HADAR_NODE": "h2",
            "HADAR_BATCH_SHARE": "0.2",
        }
    )
    assert env.protocol == 2
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (2, 3, 0, 1)
    assert (env.group_rank, env.group_world_size) == (1, 2)
    assert (env.master_addr, env.master_port, env.node) == ("127.0.0.1", 29613, "h2")
    assert env.batch_share == pytest.approx(0.2)
    assert not env.is_rank0 and env.distributed
    assert env.local_batch_size(64) == 13
    assert env.loss_scale(13, 64) == pytest.approx(13 / 64 * 3)


def test_equal_share_by_default() -> None:
    env = JobEnv.from_environ({**V1, "HADAR_PROTOCOL": "2", "RANK": "0", "WORLD_SIZE": "4"})
    assert env.batch_share == 0.25
    assert env.local_batch_size(64) == 16
    assert env.loss_scale(16, 64) == 1.0
    assert env.local_batch_size(2) == 1, "at least one example"


def test_torchrun_outside_hadar() -> None:
    env = JobEnv.from_environ(
        {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    )
    assert not env.in_hadar
    assert (env.rank, env.world_size, env.local_rank, env.batch_share) == (1, 2, 1, 0.5)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"HADAR_TOTAL_ITERATIONS": "many"}, "HADAR_TOTAL_ITERATIONS='many' is not an integer"),
        ({"HADAR_TOTAL_ITERATIONS": "0"}, "HADAR_TOTAL_ITERATIONS='0' is below 1"),
        ({"HADAR_COPY": "-1"}, "HADAR_COPY='-1' is below 0"),
        ({"HADAR_ROUND_DEADLINE": "soon"}, "HADAR_ROUND_DEADLINE='soon' is not a number"),
        ({"HADAR_ROUND_DEADLINE": "inf"}, "not a finite number"),
        ({"HADAR_PROTOCOL": "x"}, "HADAR_PROTOCOL='x' is not an integer"),
        ({"HADAR_CHECKPOINT_DIR": ""}, "HADAR_CHECKPOINT_DIR is not"),
        ({"HADAR_PROTOCOL": "2"}, "but RANK is not set"),
        (
            {"HADAR_PROTOCOL": "2", "RANK": "2", "WORLD_SIZE": "2"},
            "RANK=2 is not below WORLD_SIZE=2",
        ),
        (
            {"HADAR_PROTOCOL": "2", "RANK": "0", "WORLD_SIZE": "2", "HADAR_BATCH_SHARE": "1.5"},
            "HADAR_BATCH_SHARE=1.5 is not in (0, 1]",
        ),
        (
            {"HADAR_PROTOCOL": "2", "RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "70000"},
            "MASTER_PORT=70000 is not a port",
        ),
    ],
)
def test_bad_values_are_named(changes: dict[str, str], message: str) -> None:
    with pytest.raises(EnvError) as e:
        JobEnv.from_environ({**V1, **changes})
    assert message in str(e.value)


@pytest.mark.parametrize(
    ("key", "raw", "shown"),
    [
        ("HADAR_TOTAL_ITERATIONS", "1_000", "'1_000'"),
        ("HADAR_TOTAL_ITERATIONS", "\u0661\u0662", "'\\u0661\\u0662'"),  # Arabic-Indic 12
        ("HADAR_TOTAL_ITERATIONS", "\uff15", "'\\uff15'"),  # a fullwidth 5
        ("HADAR_SEED", " 5", "' 5'"),
        ("HADAR_SEED", "5\n", "'5\\n'"),
        ("HADAR_SEED", "  ", "'  '"),
        ("HADAR_COPY", "+5", "'+5'"),
        ("HADAR_COPY", "-0", "'-0'"),
        ("HADAR_ROUND", "0x10", "'0x10'"),
        ("HADAR_JOB_ID", "3\x1b[31m", "'3\\x1b[31m'"),
        ("HADAR_PROTOCOL", "1.0", "'1.0'"),
    ],
)
def test_integers_are_plain_ascii_digits(key: str, raw: str, shown: str) -> None:
    # int() takes all of these; hadar writes none of them, so each is a broken value.
    with pytest.raises(EnvError) as e:
        JobEnv.from_environ({**V1, key: raw})
    message = str(e.value)
    assert message.startswith(f"{key}={shown} is not an integer"), message
    assert "ASCII digits 0-9 only" in message
    assert message.isascii() and message.isprintable(), "control characters are escaped"


def test_integers_of_ranks_are_plain_digits_too() -> None:
    ranks = {**V1, "HADAR_PROTOCOL": "2", "RANK": "0", "WORLD_SIZE": "2"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_WORLD_SIZE", "MASTER_PORT"):
        with pytest.raises(EnvError, match=f"^{key}='\\+1' is not an integer"):
            JobEnv.from_environ({**ranks, key: "+1"})
    with pytest.raises(EnvError, match=r"HADAR_SEED='11111111111111111111'\.\.\. has 5000 digits"):
        JobEnv.from_environ({**V1, "HADAR_SEED": "1" * 5000})
    assert JobEnv.from_environ({**ranks, "MASTER_PORT": "029613"}).master_port == 29613
    assert JobEnv.from_environ({**V1, "HADAR_SEED": ""}).seed == 0, "empty is unset"


def test_bad_arguments() -> None:
    with pytest.raises(EnvError, match="total must be at least 1"):
        JobEnv.from_environ({}, total=0)
    with pytest.raises(EnvError, match="total must be an int"):
        JobEnv.from_environ({}, total=1.5)  # type: ignore[arg-type]
    env = JobEnv.from_environ({})
    with pytest.raises(EnvError, match="global_batch"):
        env.local_batch_size(0)


def test_reads_os_environ_by_default(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("HADAR_PROTOCOL", "1")
    clean_env.setenv("HADAR_CHECKPOINT_DIR", str(tmp_path))
    clean_env.setenv("HADAR_TOTAL_ITERATIONS", "12")
    env = JobEnv.from_environ()
    assert env.in_hadar and env.total == 12 and env.checkpoint_dir == tmp_path
