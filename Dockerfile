# streamdp worker image: `streamdp run` by default; `streamdp replay …` for the demo-data job.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md* ./
COPY streamdp ./streamdp
RUN pip install ".[kafka]" && useradd --uid 10001 --no-create-home streamdp
USER 10001
EXPOSE 9108
ENTRYPOINT ["streamdp"]
CMD ["run", "--config", "/etc/streamdp/streamdp.toml", "--metrics-port", "9108"]
