"""The openai extractor's settings (`LLMConfig`, from the values `nexus_assets.settings` hands over)
and the errors of the LLM path."""

from __future__ import annotations

import math
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

from nexus_assets.core.models import Run, Topic


class LLMError(Exception):
    """Base of the errors this module raises."""


class LLMConfigError(LLMError, ValueError):
    """The environment does not describe a usable endpoint."""


class LLMFatalError(LLMError):
    """The endpoint refuses every request (bad key, unknown model, wrong URL): retrying is pointless."""

    attempts: int = 1  # requests sent for the call that hit it


class ReplyNotJSON(LLMError, ValueError):
    """The model's reply holds no pointer JSON. Makes the call fail; never a crash."""


class CacheMiss(LLMError):
    """replay_only was asked, but a chunk has no stored successful call."""

    def __init__(self, key: str, topic: Topic | str, run: Run | str):
        self.key = key
        self.topic_id = topic.topic_id if isinstance(topic, Topic) else topic
        self.run_id = run.run_id if isinstance(run, Run) else run
        super().__init__(
            f"no stored LLM reply for topic {self.topic_id!r}, run {self.run_id!r} (call key {key[:12]}…); "
            "run without replay-only to call the model"
        )


# Optional settings: (field, variable, type, what a valid value is).


_TUNING = (
    ("concurrency", "NEXUS_LLM_CONCURRENCY", int, "a whole number of requests of at least 1"),
    ("max_output_tokens", "NEXUS_LLM_MAX_OUTPUT_TOKENS", int, "a whole number of tokens of at least 1"),
    ("timeout_s", "NEXUS_LLM_TIMEOUT", float, "a positive number of seconds"),
    ("max_reply_bytes", "NEXUS_LLM_MAX_REPLY_BYTES", int, "a whole number of bytes of at least 1"),
    ("rpm", "NEXUS_LLM_RPM", int, "a whole number of requests per minute of at least 1"),
    ("tpm", "NEXUS_LLM_TPM", int, "a whole number of tokens per minute of at least 1"),
    ("max_cost_usd", "NEXUS_LLM_MAX_COST", float, "a non-negative number of US dollars"),
    ("batch_poll_s", "NEXUS_LLM_BATCH_POLL", float, "a positive number of seconds"),
    ("batch_wait_s", "NEXUS_LLM_BATCH_WAIT", float, "a positive number of seconds"),
)


class LLMConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str
    api_key: str = Field(repr=False)  # kept out of reprs and logs
    model: str
    timeout_s: float = Field(default=120.0, gt=0)  # each request as a whole, connect to last byte
    max_retries: int = Field(default=4, ge=0)  # 408/409/429/5xx and refused connections, with backoff
    seed: int = 7
    max_output_tokens: int = Field(default=2048, ge=1)  # a reply's length limit; also sizes requests (llm.chunking)
    price_in_per_mtok: float | None = None
    price_out_per_mtok: float | None = None
    concurrency: int = Field(default=8, ge=1)  # requests in flight at once
    max_reply_bytes: int = Field(default=1_000_000, ge=1)  # a larger reply is cut off and the call fails
    rpm: int | None = Field(default=None, ge=1)  # requests per minute, when the provider sets a ceiling
    tpm: int | None = Field(default=None, ge=1)  # estimated tokens per minute, likewise
    max_cost_usd: float | None = Field(default=None, ge=0)  # stop sending before the estimate passes it
    batch_poll_s: float = Field(default=30.0, gt=0)  # how often `--batch` asks whether a batch is done
    batch_wait_s: float = Field(default=86_400.0, gt=0)  # how long one sync waits for a batch

    @classmethod
    def from_env(cls, env: Mapping[str, str], **overrides: Any) -> "LLMConfig":
        """Read OPENAI_BASE_URL, OPENAI_API_KEY, NEXUS_LLM_MODEL (required) and the optional
        NEXUS_PRICE_IN_PER_MTOK / NEXUS_PRICE_OUT_PER_MTOK (USD per million tokens),
        NEXUS_LLM_CONCURRENCY, NEXUS_LLM_MAX_OUTPUT_TOKENS, NEXUS_LLM_TIMEOUT (s), NEXUS_LLM_MAX_REPLY_BYTES, NEXUS_LLM_RPM,
        NEXUS_LLM_TPM, NEXUS_LLM_MAX_COST (USD), NEXUS_LLM_BATCH_POLL (s) and NEXUS_LLM_BATCH_WAIT (s)
        from `env`, the settings by variable (`Settings.as_env()`); the messages name the variable."""
        required = {"base_url": "OPENAI_BASE_URL", "api_key": "OPENAI_API_KEY", "model": "NEXUS_LLM_MODEL"}
        missing = [var for var in required.values() if not (env.get(var) or "").strip()]
        if missing:
            raise LLMConfigError(
                f"the openai extractor needs {', '.join(missing)} to be set "
                "(OPENAI_BASE_URL is the OpenAI-compatible endpoint, e.g. https://api.openai.com/v1 "
                "or http://127.0.0.1:8080/v1; NEXUS_LLM_MODEL the model name it serves)"
            )
        values: dict[str, Any] = {field: env[var].strip() for field, var in required.items()}
        for field_name, var in (
            ("price_in_per_mtok", "NEXUS_PRICE_IN_PER_MTOK"),
            ("price_out_per_mtok", "NEXUS_PRICE_OUT_PER_MTOK"),
        ):
            raw = (env.get(var) or "").strip()
            if raw:
                try:
                    price = float(raw)
                except ValueError:
                    raise LLMConfigError(f"{var}={raw!r} is not a number (USD per million tokens)") from None
                if not math.isfinite(price) or price < 0:
                    raise LLMConfigError(f"{var}={raw!r} must be a non-negative number (USD per million tokens)")
                values[field_name] = price
        for field_name, var, kind, what in _TUNING:
            raw = (env.get(var) or "").strip()
            if not raw:
                continue
            try:
                value = kind(raw)
            except ValueError:
                value = None
            if value is None or (isinstance(value, float) and not math.isfinite(value)) or value < (1 if kind is int else 0):
                raise LLMConfigError(f"{var}={raw!r} is not {what}")
            values[field_name] = value
        values.update(overrides)
        return cls(**values)
