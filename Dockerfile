# numaguard: one image for the webhook, the enforcer and the CLI (`numaguard <subcommand>`).
# Build and push: docs/operations.md ("Build and push the image").
#
# The base is pinned by digest (the multi-arch index of python:3.11-slim), so a rebuild gets the same
# base until someone moves the pin on purpose. To move it:
#   docker buildx imagetools inspect python:3.11-slim     # the "Digest:" line of the index
# and replace the sha256 below (keep the tag in front: it documents what the digest is).
ARG PYTHON_BASE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7
FROM ${PYTHON_BASE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A fixed, unprivileged identity: manifests (runAsUser 10001) and the compose volumes rely on it.
RUN groupadd --system --gid 10001 numaguard \
 && useradd --system --uid 10001 --gid numaguard --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin numaguard

# Dependencies first, from pyproject.toml alone: this layer is rebuilt only when pyproject.toml
# changes, not on every source edit.
COPY pyproject.toml /src/pyproject.toml
RUN python -c 'import tomllib; print("\n".join(tomllib.load(open("/src/pyproject.toml", "rb"))["project"]["dependencies"]))' \
      > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

# Then the package itself, without touching the dependencies installed above.
COPY . /src
RUN pip install --no-deps /src \
 && rm -rf /src \
 # Directories that volumes are mounted on: a fresh named volume copies this ownership, so the
 # unprivileged services can write certificates and state there.
 && install -d -o numaguard -g numaguard -m 0750 /certs /etc/numaguard /etc/numaguard/tls /var/lib/numaguard \
 # A stable path to the bundled sysfs trees of the compose demo (they live in site-packages).
 && mkdir -p /opt/numaguard \
 && ln -s "$(python -c 'import enforcer.topology, pathlib; print(pathlib.Path(enforcer.topology.__file__).parent / "fixtures")')" \
      /opt/numaguard/sysfs-fixtures \
 && test -d /opt/numaguard/sysfs-fixtures/sysfs-2numa-16cpu/devices/system/cpu

USER 10001:10001
WORKDIR /var/lib/numaguard
EXPOSE 8443
CMD ["numaguard", "--help"]
