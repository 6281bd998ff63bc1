"""Secrets from the environment or from a mounted file (the ``*_FILE`` convention of container images).

``secret("STREAMDP_STORE")`` is the value of ``$STREAMDP_STORE``, else the content of the file named by
``$STREAMDP_STORE_FILE`` (a Kubernetes Secret mounted as a volume, a Docker secret under ``/run/secrets``), with
its trailing newline removed; None when neither is set. Setting both is refused: which one applies would be a
guess. The variables read:

| variable (or ``…_FILE``) | what it holds | used when |
|---|---|---|
| ``STREAMDP_STORE`` | the budget store URL, e.g. ``redis://:PASSWORD@host:6379/0`` | no ``--store`` and no config ``store`` |
| ``STREAMDP_KAFKA_SASL_PASSWORD`` | the SASL password | the config's ``[kafka]`` has no ``sasl_password`` |

So a password never has to sit in a configuration file or a ConfigMap.
"""

from __future__ import annotations

import os
from typing import Mapping

from streamdp.config.kinds import ConfigError

#: environment variable → what it holds (for messages)
SECRETS = {"STREAMDP_STORE": "budget store URL", "STREAMDP_KAFKA_SASL_PASSWORD": "Kafka SASL password"}


def secret(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    value, path = env.get(name), env.get(f"{name}_FILE")
    if value and path:
        raise ConfigError(f"${name} and ${name}_FILE are both set: give the {SECRETS.get(name, 'secret')} once")
    if value:
        return value
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ConfigError(f"${name}_FILE={path}: cannot read the {SECRETS.get(name, 'secret')}: {why}") from None
    text = text.rstrip("\r\n")
    if not text.strip():
        raise ConfigError(f"${name}_FILE={path}: the file is empty")
    return text


def fill_kafka_secrets(kafka: dict, environ: Mapping[str, str] | None = None) -> dict:
    """``kafka['sasl_password']`` from the environment when the configuration has none (in place; returned)."""
    if kafka.get("sasl_password") is None:
        pw = secret("STREAMDP_KAFKA_SASL_PASSWORD", environ)
        if pw is not None:
            kafka["sasl_password"] = pw
    return kafka
