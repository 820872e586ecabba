#!/usr/bin/env bash
# `make compose-check`: docker-compose.yml on a real Docker engine, the README's path end to end.
#
#   config (every profile) -> build -> up -> health -> produce/consume -> kill a node ->
#   chaos runner -> spark demo -> add a node (deploy/add-node.yml) -> down -v (nothing left behind)
#
# The engine: the running one when `docker info` answers; else, as root, Debian's `dockerd` started
# here and stopped at the end (by its pid; only that one). COMPOSE_CHECK_INSTALL=1 first installs
# docker.io, docker-compose and debootstrap with apt-get when they are missing. Where no engine can
# run (no dockerd, not root, or dockerd does not come up: CI), the check says why and exits 0.
#
# The images: python:3.11-slim when it is present or can be pulled; otherwise (no registry
# reachable) a Debian bookworm image made with debootstrap and `docker import`, cached as the image
# flotilla-base:bookworm and as a tarball under ${XDG_CACHE_HOME:-~/.cache}/flotilla/ (the first
# build takes minutes, later runs seconds). It carries the host's extra CA certificates
# (/usr/local/share/ca-certificates), so pip inside the build trusts what the host trusts.
#
# Compose: `docker compose` (v2) when the plugin is there, else `docker-compose` (v1);
# COMPOSE_CHECK_COMPOSE="docker-compose" chooses. The stack runs as project `flotilla-check` (its own containers, network and volumes).
# When a host port the file publishes is taken, the check runs a copy of the file without `ports:`
# and says so. Every step has a deadline; the whole check stops after COMPOSE_CHECK_DEADLINE_S
# (default 1800). Exit 0: passed or skipped (the reason printed); 1: a step failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROJECT="flotilla-check"
DEADLINE_S="${COMPOSE_CHECK_DEADLINE_S:-1800}"
CHAOS_DURATION_S="${COMPOSE_CHECK_CHAOS_S:-20}"
CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/flotilla"
BASE_IMAGE="python:3.11-slim"
LOCAL_BASE_IMAGE="flotilla-base:bookworm"
MONITORING_IMAGES=("prom/prometheus:v3.1.0" "grafana/grafana:11.4.0")
PUBLISHED_PORTS=(7001 9101 9102 9103 9104)
RECORDS_PER_PARTITION=100
START_S=$SECONDS
WORK="$(mktemp -d "${TMPDIR:-/tmp}/flotilla-compose-check.XXXXXX")"
DOCKERD_PID=""
STACK_STARTED=0
COMPOSE_FILE="$ROOT/docker-compose.yml"
ADD_NODE_FILE="$ROOT/deploy/add-node.yml"

say() { printf '%s\n' "compose-check: $*"; }
skip() {
    say "SKIP: $*"
    exit 0
}
fail() {
    say "FAIL: $*"
    exit 1
}
left_s() { echo $((DEADLINE_S - (SECONDS - START_S))); }
step() { # step NAME: prints the step and checks the overall deadline
    (($(left_s) > 0)) || fail "over the ${DEADLINE_S} s deadline before '$1'"
    say "== $1 ($((SECONDS - START_S)) s)"
}
bounded() { # bounded SECONDS CMD...: the command, stopped when it overruns (or the deadline does)
    local limit=$1
    shift
    local left
    left=$(left_s)
    ((limit < left)) || limit=$left
    ((limit > 0)) || fail "over the ${DEADLINE_S} s deadline: $*"
    timeout --kill-after=10 "$limit" "$@"
}

cleanup() {
    local status=$?
    set +e
    if ((STACK_STARTED)); then
        say "cleanup: removing the stack ${PROJECT} (containers, network, volumes)"
        timeout --kill-after=10 120 "${COMPOSE[@]}" --profile tools \
            --profile chaos --profile spark --profile monitoring down -v --remove-orphans >"$WORK/cleanup.log" 2>&1 ||
            cat "$WORK/cleanup.log"
    fi
    if [[ -n "$DOCKERD_PID" ]]; then
        say "cleanup: stopping the dockerd this check started (pid $DOCKERD_PID)"
        kill -TERM "$DOCKERD_PID" 2>/dev/null
        for _ in $(seq 1 60); do
            kill -0 "$DOCKERD_PID" 2>/dev/null || break
            sleep 0.5
        done
        kill -KILL "$DOCKERD_PID" 2>/dev/null
    fi
    # debootstrap mounts proc (and sys) inside its target: unmount, and never delete across a mount
    awk -v work="$WORK/" 'index($2, work) == 1 {print $2}' /proc/mounts | sort -r |
        while read -r mount_point; do umount -l "$mount_point"; done
    rm -rf --one-file-system "$WORK"
    exit "$status"
}
trap cleanup EXIT
trap 'fail "interrupted"' INT TERM
# one check at a time on a machine: a second one would tear down the first one's stack
exec 9>"${TMPDIR:-/tmp}/flotilla-compose-check.lock"
flock -n 9 || fail "another compose-check is running here (lock ${TMPDIR:-/tmp}/flotilla-compose-check.lock)"

# -- the engine ---------------------------------------------------------------------------------
install_missing() {
    local wanted=()
    command -v dockerd >/dev/null || wanted+=(docker.io)
    command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 ||
        wanted+=(docker-compose)
    command -v debootstrap >/dev/null || wanted+=(debootstrap)
    ((${#wanted[@]})) || return 0
    say "installing ${wanted[*]} with apt-get (COMPOSE_CHECK_INSTALL=1)"
    bounded 600 apt-get update -q >"$WORK/apt.log" 2>&1 &&
        DEBIAN_FRONTEND=noninteractive bounded 900 apt-get install -y -q "${wanted[@]}" \
            >>"$WORK/apt.log" 2>&1 || {
        tail -20 "$WORK/apt.log"
        fail "apt-get install ${wanted[*]} failed"
    }
}

start_engine() {
    if command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1; then
        say "engine: the running Docker engine ($(docker version --format '{{.Server.Version}}'))"
        return
    fi
    if [[ "${COMPOSE_CHECK_INSTALL:-0}" == 1 && $(id -u) == 0 ]] && command -v apt-get >/dev/null
    then
        install_missing
    fi
    command -v docker >/dev/null || skip "no docker command (apt-get install docker.io, or" \
        "COMPOSE_CHECK_INSTALL=1 make compose-check as root)"
    command -v dockerd >/dev/null || skip "no Docker engine answers and there is no dockerd to" \
        "start (apt-get install docker.io, or COMPOSE_CHECK_INSTALL=1 as root)"
    [[ $(id -u) == 0 ]] || skip "no Docker engine answers and starting dockerd needs root"
    [[ -S /var/run/docker.sock ]] && skip "/var/run/docker.sock exists but no engine answers on" \
        "it: not starting a second dockerd"
    say "engine: starting dockerd (log: $WORK/dockerd.log)"
    dockerd --host unix:///var/run/docker.sock >"$WORK/dockerd.log" 2>&1 &
    DOCKERD_PID=$!
    for _ in $(seq 1 120); do
        timeout 5 docker info >/dev/null 2>&1 && {
            say "engine: dockerd $(docker version --format '{{.Server.Version}}') up (pid $DOCKERD_PID)"
            return
        }
        kill -0 "$DOCKERD_PID" 2>/dev/null || break
        sleep 0.5
    done
    tail -5 "$WORK/dockerd.log"
    skip "dockerd did not come up here (no privileges for containers?): no engine can run"
}

choose_compose() {
    if [[ -n "${COMPOSE_CHECK_COMPOSE:-}" ]]; then
        read -r -a COMPOSE_CMD <<<"$COMPOSE_CHECK_COMPOSE"
    elif docker compose version >/dev/null 2>&1; then
        COMPOSE_CMD=(docker compose)
    elif command -v docker-compose >/dev/null; then
        COMPOSE_CMD=(docker-compose)
    else
        skip "neither 'docker compose' (v2) nor 'docker-compose' (v1) is installed"
    fi
    say "compose: ${COMPOSE_CMD[*]} ($("${COMPOSE_CMD[@]}" version --short 2>/dev/null ||
        "${COMPOSE_CMD[@]}" version | head -1))"
}

# -- the base image -----------------------------------------------------------------------------
base_image() {
    if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 ||
        bounded 120 docker pull -q "$BASE_IMAGE" >/dev/null 2>&1; then
        say "base image: $BASE_IMAGE"
        return
    fi
    export FLOTILLA_BASE_IMAGE="$LOCAL_BASE_IMAGE"
    if docker image inspect "$LOCAL_BASE_IMAGE" >/dev/null 2>&1; then
        say "base image: $BASE_IMAGE cannot be pulled; using the cached $LOCAL_BASE_IMAGE"
        return
    fi
    local tarball="$CACHE_DIR/base-bookworm.tar"
    if [[ ! -s "$tarball" ]]; then
        command -v debootstrap >/dev/null || fail "$BASE_IMAGE cannot be pulled and debootstrap" \
            "is missing to make a base image (apt-get install debootstrap)"
        [[ $(id -u) == 0 ]] || fail "debootstrap needs root to make the base image"
        say "base image: $BASE_IMAGE cannot be pulled; making $LOCAL_BASE_IMAGE with debootstrap" \
            "(minutes; cached in $tarball)"
        local rootfs="$WORK/rootfs"
        bounded 1200 debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
            bookworm "$rootfs" http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1 || {
            tail -20 "$WORK/debootstrap.log"
            fail "debootstrap failed"
        }
        if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
            cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
            chroot "$rootfs" update-ca-certificates >/dev/null 2>&1 ||
                fail "update-ca-certificates in the base image failed"
        fi
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        mkdir -p "$CACHE_DIR"
        tar --numeric-owner -C "$rootfs" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
        rm -rf "$rootfs"
    fi
    say "base image: importing $tarball as $LOCAL_BASE_IMAGE"
    bounded 300 docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["bash"]' \
        "$tarball" "$LOCAL_BASE_IMAGE" >/dev/null || fail "docker import of $tarball failed"
}

# -- compose helpers ----------------------------------------------------------------------------
port_taken() {
    python3 - "$1" <<'EOF'
import socket, sys
with socket.socket() as s:
    try:
        s.bind(("127.0.0.1", int(sys.argv[1])))
    except OSError:
        sys.exit(0)
sys.exit(1)
EOF
}

choose_file() {
    local taken=()
    for port in "${PUBLISHED_PORTS[@]}"; do
        if port_taken "$port"; then taken+=("$port"); fi
    done
    if ((${#taken[@]})); then
        COMPOSE_FILE="$WORK/docker-compose.unpublished.yml"
        ADD_NODE_FILE="$WORK/add-node.unpublished.yml"
        # the generated files' `ports:` blocks: "    ports:" and the "      - ..." lines under it
        local unpublish='/^    ports:$/ {skip=1; next} skip && /^      - / {next} {skip=0; print}'
        awk "$unpublish" "$ROOT/docker-compose.yml" >"$COMPOSE_FILE"
        awk "$unpublish" "$ROOT/deploy/add-node.yml" >"$ADD_NODE_FILE"
        say "host ports ${taken[*]} are taken here: running docker-compose.yml and" \
            "deploy/add-node.yml without their 'ports:' (nothing published on the host; every" \
            "other line as committed)"
    fi
    COMPOSE=("${COMPOSE_CMD[@]}" -p "$PROJECT" -f "$COMPOSE_FILE" --project-directory "$ROOT")
}

container_of() { "${COMPOSE[@]}" ps -q "$1" 2>/dev/null | head -1; }

wait_healthy() { # wait_healthy SECONDS SERVICE...
    local limit=$1
    shift
    local until_s=$((SECONDS + limit)) service id status
    for service in "$@"; do
        while :; do
            id=$(container_of "$service")
            status=$([[ -n "$id" ]] && docker inspect -f '{{.State.Health.Status}}' "$id" || true)
            [[ "$status" == healthy ]] && break
            ((SECONDS < until_s)) || {
                [[ -n "$id" ]] && docker logs --tail 20 "$id"
                fail "$service is not healthy after ${limit} s (last: ${status:-no container})"
            }
            sleep 1
        done
    done
    say "healthy: $*"
}

client() { bounded 120 "${COMPOSE[@]}" run --rm -T client "$@" 2>>"$WORK/client.log"; }

produce_and_consume() { # produce_and_consume TAG: RECORDS_PER_PARTITION more into each partition
    local tag=$1 partition expected got
    for partition in 0 1 2; do
        seq 1 "$RECORDS_PER_PARTITION" | sed "s/^/$tag-p$partition-/" >"$WORK/sent"
        client produce check --partition "$partition" <"$WORK/sent" >/dev/null ||
            fail "produce to check/$partition failed: $(tail -3 "$WORK/client.log")"
        client consume check --partition "$partition" --from-beginning -e >"$WORK/read" ||
            fail "consume of check/$partition failed: $(tail -3 "$WORK/client.log")"
        expected=$(cat "$WORK/sent")
        got=$(grep "^$tag-p$partition-" "$WORK/read" || true)
        [[ "$got" == "$expected" ]] ||
            fail "check/$partition: read $(wc -l <<<"$got") of the $RECORDS_PER_PARTITION '$tag'" \
                "records, or out of order"
    done
    say "produced and read back ${RECORDS_PER_PARTITION} records on each of 3 partitions ($tag)"
}

# -- the check ----------------------------------------------------------------------------------
step "engine"
start_engine
choose_compose
export FLOTILLA_CLUSTER_SECRET="compose-check-$(date +%s)-$RANDOM$RANDOM"
choose_file

step "config: every profile"
for profiles in "" "chaos" "spark" "tools" "monitoring"; do
    args=()
    [[ -n "$profiles" ]] && args=(--profile "$profiles")
    bounded 60 "${COMPOSE[@]}" "${args[@]}" config -q || fail "config${profiles:+ --profile $profiles}"
done
services=$("${COMPOSE[@]}" --profile monitoring config --services | sort | tr '\n' ' ')
[[ "$services" == *grafana* && "$services" == *prometheus* ]] ||
    fail "the monitoring profile lacks prometheus or grafana: $services"
bounded 60 "${COMPOSE[@]}" -f "$ADD_NODE_FILE" config -q ||
    fail "config merged with deploy/add-node.yml"
say "config valid with no profile, with each of chaos spark tools monitoring, and with" \
    "deploy/add-node.yml merged"

step "base image"
base_image

step "build: flotilla:local, flotilla-spark:local"
# a stack left by an interrupted run goes first
STACK_STARTED=1
bounded 120 "${COMPOSE[@]}" --profile tools --profile chaos --profile spark \
    down -v --remove-orphans >/dev/null 2>&1 || true
bounded 1800 "${COMPOSE[@]}" build n1 spark-demo >"$WORK/build.log" 2>&1 || {
    tail -30 "$WORK/build.log"
    fail "build"
}

step "up: n1 n2 n3"
bounded 180 "${COMPOSE[@]}" up -d >"$WORK/up.log" 2>&1 || {
    cat "$WORK/up.log"
    fail "up -d"
}
wait_healthy 180 n1 n2 n3

step "produce/consume through the client service"
client topic create check --partitions 3 --replication-factor 3 >/dev/null ||
    fail "topic create: $(tail -3 "$WORK/client.log")"
produce_and_consume first

step "kill a node: n3 (SIGKILL), then start it again"
bounded 60 docker kill "$(container_of n3)" >/dev/null || fail "docker kill n3"
produce_and_consume n3-dead
bounded 60 "${COMPOSE[@]}" start n3 >/dev/null 2>&1 || fail "start n3"
wait_healthy 180 n3
produce_and_consume n3-back

step "chaos runner (${CHAOS_DURATION_S} s of partition-random,kill-leader)"
bounded $((CHAOS_DURATION_S + 300)) "${COMPOSE[@]}" run --rm -T chaos-runner run --nodes 3 \
    --nemesis partition-random,kill-leader --duration "$CHAOS_DURATION_S" --seed 7 \
    >"$WORK/chaos.log" 2>&1 || {
    tail -20 "$WORK/chaos.log"
    fail "chaos runner"
}
grep -E '^(acked|anomalies|OK)' "$WORK/chaos.log" | sed 's/^/  /'

step "spark demo"
bounded 900 "${COMPOSE[@]}" run --rm -T spark-demo >"$WORK/spark.log" 2>&1 || {
    tail -30 "$WORK/spark.log"
    fail "spark demo"
}
grep -E 'spark job:' "$WORK/spark.log" | sed 's/^/  /' || fail "the spark demo printed no summary"

step "monitoring profile"
if docker image inspect "${MONITORING_IMAGES[@]}" >/dev/null 2>&1 ||
    { bounded 180 docker pull -q "${MONITORING_IMAGES[0]}" >/dev/null 2>&1 &&
        bounded 180 docker pull -q "${MONITORING_IMAGES[1]}" >/dev/null 2>&1; }; then
    bounded 120 "${COMPOSE[@]}" --profile monitoring up -d prometheus grafana ||
        fail "monitoring up"
    for _ in $(seq 1 60); do
        running=$(docker inspect -f '{{.State.Running}}' "$(container_of prometheus)" \
            "$(container_of grafana)" | sort -u | tr '\n' ' ')
        [[ "$running" == "true " ]] && break
        sleep 1
    done
    [[ "$running" == "true " ]] || fail "prometheus and grafana are not both running"
    say "prometheus and grafana running"
else
    say "not run: ${MONITORING_IMAGES[*]} cannot be pulled here (no registry reachable);" \
        "its configuration was validated above"
fi

step "add a node: n4 (deploy/add-node.yml merged as the override), as deploy/README-deploy.md says"
# the README copies it to docker-compose.override.yml, which Compose merges in every later
# command; naming it with -f from here on is the same merge
COMPOSE+=(-f "$ADD_NODE_FILE")
bounded 120 "${COMPOSE[@]}" up -d n4 >"$WORK/up.log" 2>&1 || {
    cat "$WORK/up.log"
    fail "up -d n4"
}
wait_healthy 180 n4

step "down -v"
bounded 180 "${COMPOSE[@]}" down -v >"$WORK/down.log" 2>&1 || {
    cat "$WORK/down.log"
    fail "down -v after adding n4"
}
left=$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT")
[[ -z "$left" ]] || fail "containers left after down -v: $left"
left=$(docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT")
[[ -z "$left" ]] || fail "volumes left after down -v: $left"
left=$(docker network ls -q --filter "label=com.docker.compose.project=$PROJECT")
[[ -z "$left" ]] || fail "networks left after down -v: $left"
STACK_STARTED=0
say "nothing of ${PROJECT} is left"

say "PASSED in $((SECONDS - START_S)) s (${COMPOSE_CMD[*]})"
