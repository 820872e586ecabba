# The Spark demo's image (compose service `spark-demo`, profile `spark`): the project with the
# `spark` extra (pyspark, pyarrow) and a JRE, running `python -m flotilla.spark_demo` against
# $FLOTILLA_BOOTSTRAP. Built from the repository root: docker build -f deploy/spark.Dockerfile .
# A file of its own, not a stage of ./Dockerfile: the legacy builder (docker-compose v1) builds
# every stage before its target, so a node image build would install a JRE and Spark for nothing.

ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    VIRTUAL_ENV=/opt/flotilla/venv \
    PATH=/opt/flotilla/venv/bin:$PATH
RUN groupadd --system --gid 10001 flotilla \
 && useradd --system --uid 10001 --gid flotilla --home-dir /home/flotilla --create-home \
        --shell /usr/sbin/nologin flotilla \
 && python3 -m venv /opt/flotilla/venv
WORKDIR /home/flotilla

FROM base AS build
COPY . /tmp/flotilla-src
RUN pip install --no-cache-dir "/tmp/flotilla-src[spark]"

FROM base AS spark
# the JRE follows the base image's Debian release (17 or 21, both run Spark 4); a pinned version
# would break the build at the next point release of the base image
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends default-jre-headless \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/flotilla/venv /opt/flotilla/venv
USER 10001:10001
ENTRYPOINT ["python", "-m", "flotilla.spark_demo"]
