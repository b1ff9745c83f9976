# syntax=docker/dockerfile:1
# gateway-operator image: a venv built in the first stage, copied into a slim runtime.
# BASE_IMAGE: any Debian-like image with python3 (venv), groupadd/useradd; hack/images.sh passes
# its locally built Debian base (and the machine's pip settings as the PIP_* build args).

ARG BASE_IMAGE=python:3.11.11-slim-bookworm
FROM ${BASE_IMAGE} AS build
# pip settings of the building machine (unset unless passed: no effect on a plain docker build)
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST
ARG PIP_CERT
WORKDIR /src
COPY requirements.lock pyproject.toml ./
COPY hack/image-install.sh hack/image-install.sh
COPY operator/ operator/
# the same install step the tests run in a clean venv (tests/unit/test_packaging.py)
RUN bash hack/image-install.sh /opt/gateway-operator /src

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="gateway-operator" \
      org.opencontainers.image.description="Kubernetes operator for PraisonAI gateway replicas"
# not "operator": Debian's base-passwd already has a group of that name (gid 37)
RUN groupadd --system --gid 10001 gateway-operator \
 && useradd --system --uid 10001 --gid gateway-operator --no-create-home --shell /usr/sbin/nologin gateway-operator
COPY --from=build /opt/gateway-operator /opt/gateway-operator
ENV PATH=/opt/gateway-operator/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 8080 8081
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
  CMD ["python3", "-c", "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8081/healthz', timeout=4)"]
ENTRYPOINT ["gateway-operator"]
CMD ["run"]
