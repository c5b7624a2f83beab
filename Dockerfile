# The image of every AHP Celery service: the HTTP API, the workers and Flower (compose.yaml
# runs one command each from it).
#   docker build -t ahp-celery .
#   docker run --rm -e REDIS_URL=redis://:password@host:6379/0 ahp-celery ahp-celery worker
# Redis itself is not in this image: use Redis 8 (the official image bundles the Query
# Engine and JSON that the checkpoints need), see compose.yaml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    LANGGRAPH_STRICT_MSGPACK=true

# Only what the package needs; tests, CI files and the virtualenv stay out (.dockerignore).
# README.md is the package's readme; the glob keeps the build working before it exists.
COPY pyproject.toml README.m[d] /tmp/src/
COPY harness /tmp/src/harness
COPY tooling /tmp/src/tooling
COPY workers /tmp/src/workers
COPY wire /tmp/src/wire
# The package's dependencies include the API server (uvicorn) and Flower.
RUN pip install /tmp/src \
    && rm -rf /tmp/src

RUN groupadd --system --gid 10001 ahp \
    && useradd --system --uid 10001 --gid ahp --home-dir /home/ahp --create-home ahp
USER ahp
WORKDIR /home/ahp

# Settings come from the environment: REDIS_URL (or AHP_REDIS_URL) and the other AHP_*
# variables (`ahp-celery settings` prints them); the API's AHP_API_*; FLOWER_BASIC_AUTH.
# The API listens on 8000 (`ahp-celery api`), Flower on 5555 (`ahp-celery flower`).
EXPOSE 8000 5555
CMD ["ahp-celery", "worker", "--concurrency", "2"]
