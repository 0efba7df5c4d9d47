# numaguard: one image for the webhook, the enforcer and the CLI (`numaguard <subcommand>`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A fixed, unprivileged identity: manifests (runAsUser 10001) and the compose volumes rely on it.
RUN groupadd --system --gid 10001 numaguard \
 && useradd --system --uid 10001 --gid numaguard --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin numaguard

COPY . /src
RUN pip install /src \
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
