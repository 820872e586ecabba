# The only commands a newcomer needs. Each target creates or updates .venv by itself.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
EXTRAS ?= test,dev
DEMO_COUNT ?= 100000

.PHONY: demo test lint format venv bench soak chaos proto clean compose-check

$(STAMP): pyproject.toml scripts/preflight.sh
	@PYTHON=$(PYTHON) scripts/preflight.sh
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	@touch $(STAMP)

venv: $(STAMP)

## The main job: a local 3-node cluster, 100,000 records produced and read back from followers.
demo: $(STAMP)
	@scripts/preflight.sh java
	$(PY) -m flotilla demo --count $(DEMO_COUNT)

## The test suite CI runs (its budget: 15 minutes on 2 cores). Two workers take it to about 7
## minutes there (12-15 in one process): the suite mostly waits on node processes, not the CPU.
## Each worker (pytest-xdist) takes whole files, so a module's shared cluster stays in one
## process, and draws its clusters' ports from a range of its own (tests/conftest.py).
## TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
test: $(STAMP)
	@scripts/preflight.sh java
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

bench: $(STAMP)
	$(PY) -m bench.storage
	$(PY) -m bench.produce
	$(PY) -m bench.vs_nats
	$(PY) -m bench.failover
	$(PY) -m bench.idle --partitions 1000
	$(PY) -m bench.queue
	$(PY) -m bench.delay

## The chaos sweep: every nemesis, three seeds, 60 s of faults each (CI runs a short one).
## "all" includes disk (EIO/ENOSPC on write/fsync, fail-stop required); churn needs spare
## nodes (5 nodes, replication 3) and replicas that move (replace_after 2 s). The last two
## sweeps add a consumer group's members, then a queue group's 8 receiver processes (acks,
## releases, rejects, expiries, crashes; chaos.queue_checker judges the drained group). The
## last adds 20 delayed records a second (chaos.delay_checker: each fires once, never early,
## late by at most an election + 1 s during faults, 1 s otherwise).
chaos: $(STAMP)
	$(PY) -m chaos sweep --nodes 3 --nemesis all --seeds 1,2,3 --duration 60
	$(PY) -m chaos sweep --nodes 5 --nemesis churn --seeds 1,2,3 --duration 60 --replace-after-s 2
	$(PY) -m chaos sweep --nodes 3 --nemesis kill-leader,pause,partition-random --seeds 1,2,3 --duration 60 --group-members 3
	$(PY) -m chaos sweep --nodes 3 --nemesis kill-leader,pause,partition-random --seeds 1,2,3 --duration 60 --producers 4 --queue-receivers 8
	$(PY) -m chaos sweep --nodes 3 --nemesis kill-leader,pause,partition-random --seeds 1,2,3 --duration 60 --delayed 20

## The long Raft simulation sweep: 10,000 seeds x 2,000 steps with membership churn (about 35 min
## on one core), then 2,000 seeds on the real storage code over a simulated disk (crashes that
## lose or tear unsynced writes, bit flips at rest, failed writes and fsyncs; about 13 min on one core). CI runs 300 + 40
## seeds inside `make test`. Then 2,000 seeds of the consumer-group simulator (consumers/sim), each run twice,
## and 2,000 of its queue simulation (--queue; about 10 min on one core).
soak: $(STAMP)
	$(PY) -m raft.sim --seeds 10000 --steps 2000 --nodes 3,5 --jobs 2
	$(PY) -m raft.sim --first-seed 10000 --seeds 2000 --steps 2000 --nodes 3,5 --disk sim --jobs 2
	$(PY) -m consumers.sim --first-seed 10000 --seeds 2000 --steps 600 --twice
	$(PY) -m consumers.sim --queue --first-seed 10000 --seeds 2000 --steps 600 --twice
	$(PY) -m timers.sim --first-seed 10000 --seeds 2000 --twice

## Regenerate docs/configuration.md and docs/cli.md from the code (a test fails when they are stale).
.PHONY: docs
docs: $(STAMP)
	$(PY) -m scripts.gen_docs

## docker-compose.yml on a real Docker engine: build, up, health, produce/consume, kill a node,
## chaos runner, Spark demo, add a node, down -v (about 5 min warm; the first run makes a base
## image with debootstrap when no registry is reachable). Not part of `make test`; it starts
## dockerd when none runs (as root) and skips with a message where no engine can run.
compose-check:
	scripts/compose_check.sh

## Regenerate proto/*_pb2*.py from proto/*.proto (a test fails when they are stale).
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. --pyi_out=. proto/*.proto

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
