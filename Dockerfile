# memproxy: slim, non-root image. Build: docker build -t memproxy .
# Run:   docker run -p 8080:8080 -v memproxy-data:/data memproxy
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Locked runtime dependencies first: this layer is reused until the lock changes.
COPY requirements.lock ./
RUN python -m venv /opt/memproxy \
 && /opt/memproxy/bin/pip install -r requirements.lock
COPY pyproject.toml README.md ./
COPY proxy ./proxy
RUN /opt/memproxy/bin/pip install --no-deps .

FROM python:3.11-slim
ENV PATH=/opt/memproxy/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    MEMPROXY_HOST=0.0.0.0 \
    MEMPROXY_PORT=8080 \
    MEMPROXY_DATA_DIR=/data \
    MEMPROXY_LOG_FORMAT=json
RUN groupadd --system --gid 10001 memproxy \
 && useradd --system --uid 10001 --gid memproxy --home-dir /data --shell /usr/sbin/nologin memproxy \
 && mkdir -p /data /etc/memproxy \
 && chown memproxy:memproxy /data
COPY --from=build /opt/memproxy /opt/memproxy
COPY config/memproxy.yaml /etc/memproxy/memproxy.example.yaml
USER memproxy:memproxy
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8080
# The slim image has no curl: probe /healthz with the interpreter that is already there.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os,urllib.request as u; u.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('MEMPROXY_PORT', '8080'), timeout=2)"]
# SIGTERM lets in-flight requests and streams finish (server.graceful_timeout_s).
STOPSIGNAL SIGTERM
ENTRYPOINT ["memproxy"]
CMD ["serve"]
