"""aiokafka client settings from the ``[kafka]`` section of the service configuration (incl. SASL/SSL)."""

from __future__ import annotations

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def check_security(kafka: dict) -> None:
    """The security settings of ``kafka`` (the parsed ``[kafka]`` table) fit together; raises :class:`ValueError`
    naming the setting otherwise. Pure (no aiokafka import): ``streamdp config check`` runs it too."""
    proto = kafka.get("security_protocol") or "PLAINTEXT"
    if proto not in SECURITY_PROTOCOLS:
        raise ValueError(f"kafka.security_protocol: must be one of {list(SECURITY_PROTOCOLS)}, got {proto!r}")
    if proto not in ("SSL", "SASL_SSL") and kafka.get("ssl_cafile"):
        raise ValueError("kafka.ssl_cafile: only used with security_protocol SSL or SASL_SSL")
    if proto.startswith("SASL_"):
        mech = kafka.get("sasl_mechanism") or "PLAIN"
        if mech not in SASL_MECHANISMS:
            raise ValueError(f"kafka.sasl_mechanism: must be one of {list(SASL_MECHANISMS)}, got {mech!r}")
        if not kafka.get("sasl_username") or kafka.get("sasl_password") is None:
            raise ValueError("kafka.sasl_username / kafka.sasl_password: required with SASL security protocols")
    elif kafka.get("sasl_mechanism") or kafka.get("sasl_username"):
        raise ValueError("kafka.sasl_mechanism: SASL settings need security_protocol SASL_PLAINTEXT or SASL_SSL")


def client_kwargs(kafka: dict, *, client_id: str = "streamdp") -> dict:
    """Keyword arguments common to aiokafka's producer, consumer and admin client.

    ``kafka`` is the parsed ``[kafka]`` table (:data:`streamdp.config.loader.KAFKA_PARAMS`). SSL uses a default
    context (system CAs, hostname checks) with ``ssl_cafile`` added when given; SASL needs a mechanism, user and
    password. Raises :class:`ValueError` naming the setting when they do not fit together (:func:`check_security`).
    """
    check_security(kafka)
    proto = kafka.get("security_protocol") or "PLAINTEXT"
    kw: dict = {"bootstrap_servers": kafka.get("bootstrap") or "localhost:9092", "client_id": client_id,
                "security_protocol": proto}
    if proto in ("SSL", "SASL_SSL"):
        from aiokafka.helpers import create_ssl_context

        kw["ssl_context"] = create_ssl_context(cafile=kafka.get("ssl_cafile"))
    if proto.startswith("SASL_"):
        kw.update(sasl_mechanism=kafka.get("sasl_mechanism") or "PLAIN",
                  sasl_plain_username=kafka["sasl_username"], sasl_plain_password=kafka["sasl_password"])
    return kw


def redacted(kw: dict) -> dict:
    """``kw`` safe to log (no password, no SSL context object)."""
    return {k: ("***" if "password" in k else "<ssl context>" if k == "ssl_context" else v) for k, v in kw.items()}
