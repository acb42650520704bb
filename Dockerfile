# syntax=docker/dockerfile:1
# The agentgw image: the gateway with its models (embeddings, Whisper, Piper) and
# the PostgreSQL driver, run as a non-root user, data in the /data volume.
#
#   docker build -t agentgw .
#   docker run -d -p 127.0.0.1:8080:8080 -v agentgw-data:/data \
#     -v "$PWD/secrets/agentgw_access_token:/run/secrets/agentgw_access_token:ro" \
#     -e AGENTGW_SERVER__ACCESS_TOKEN_FILE=/run/secrets/agentgw_access_token agentgw
#
# compose.yaml does the same with Docker secrets and an optional PostgreSQL.

# Both stages on one base, so the virtual environment built in the first runs
# unchanged in the second (its python links to /usr/local/bin/python3.11).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    # hnswlib has no wheel and compiles with -march=native unless told not to: an
    # image built on one CPU would die with SIGILL on an older one.
    HNSWLIB_NO_NATIVE=1
# A compiler for hnswlib; it stays in this stage.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/agentgw
ENV PATH=/opt/agentgw/bin:$PATH
# torch first and pinned, as scripts/setup does: PyPI's Linux torch wheel pulls
# in several GB of CUDA libraries, which a CPU-only gateway never uses. The
# PyTorch CPU index serves 2.13.0+cpu, which satisfies the models extra's
# torch==2.13.0, so the project install below keeps it. Point TORCH_INDEX_URL at
# a mirror when the build has no way out to that index.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN pip install "torch==2.13.0" --index-url "${TORCH_INDEX_URL}"
COPY pyproject.toml README.md LICENSE /src/
COPY gateway /src/gateway
COPY channels /src/channels
COPY memory /src/memory
COPY persona /src/persona
COPY voice /src/voice
COPY web /src/web
# Not editable: the runtime stage takes /opt/agentgw and leaves /src behind.
RUN pip install "/src[models,postgres]" \
    && python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"

FROM ${PYTHON_IMAGE}
# Nothing to add from Debian at run time: the wheels bring their native libraries
# (PyAV its ffmpeg, piper-tts its espeak-ng, ctranslate2 and torch their OpenMP),
# and the base has libstdc++ and OpenSSL.
RUN groupadd --system --gid 10001 agentgw \
    && useradd --system --uid 10001 --gid agentgw --home-dir /data --no-create-home \
       --shell /usr/sbin/nologin agentgw \
    && mkdir -p /data /etc/agentgw \
    && chown agentgw:agentgw /data
COPY --from=build /opt/agentgw /opt/agentgw
COPY LICENSE /opt/agentgw/LICENSE
ENV PATH=/opt/agentgw/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    AGENTGW_STORE__DATA_DIR=/data \
    # The exported ONNX query model (memory.model_cache_dir) kept in the volume.
    XDG_CACHE_HOME=/data/cache \
    # Listening beyond the container's loopback needs an access token: the gateway
    # refuses to start without one (set AGENTGW_SERVER__ACCESS_TOKEN_FILE).
    AGENTGW_SERVER__HOST=0.0.0.0 \
    AGENTGW_SERVER__PORT=8080 \
    # The models come inside their packages; nothing is fetched at run time.
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1
# A config file, if any, goes to /etc/agentgw/agentgw.toml (read-only mount); the
# working directory holds none, so that is the one found.
WORKDIR /opt/agentgw
VOLUME /data
EXPOSE 8080
USER agentgw
# No curl in the slim image: Python asks /healthz on the container's loopback,
# which needs no token (web/guard.py leaves /healthz open and trusts 127.0.0.1).
# The start period covers a first start that exports the ONNX query model.
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('AGENTGW_SERVER__PORT', '8080') + '/healthz', timeout=4)"]
# SIGTERM (docker stop) drains turns in flight for server.shutdown_grace_s (10 s)
# before the store closes: give `docker stop` more than that (-t 30; compose sets
# stop_grace_period).
ENTRYPOINT ["agentgw"]
CMD ["run"]
