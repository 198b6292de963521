"""A run's fingerprint: what was measured (model, instance, GPUs, image, vLLM version, serving
options) and how (load, engine and Python versions, the client host's CPU and load average), as
field -> value pairs, and two runs' fingerprints side by side with the fields that differ marked."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from servingctl.schema.results import RunResult

# Reproducibility keys shown in rows of their own; the rest of the serving options follow them.
SHOWN = ("model_id", "revision", "image", "vllm_version")


@dataclass(frozen=True)
class FingerprintRow:
    """One field of two runs' fingerprints ('-': that run does not know it)."""

    field: str
    baseline: str
    run: str

    @property
    def differs(self) -> bool:
        """True when the two runs disagree on this field."""
        return self.baseline != self.run

    def as_dict(self) -> dict[str, str | bool]:
        """Plain dict for JSON output."""
        return asdict(self) | {"differs": self.differs}


def _load(load: tuple[float, float, float] | None) -> str:
    return "-" if load is None else f"{load[0]:.2f}"  # the 1-minute average


def _loads(start: tuple[float, float, float] | None, end: tuple[float, float, float] | None) -> str:
    return "-" if start is None and end is None else f"{_load(start)} -> {_load(end)}"


def prompts_text(run: RunResult) -> str:
    """What the run sent: the dataset (format, sha256, prompts taken of usable entries, skipped,
    where output lengths came from), drawn lengths, or the synthetic prompts."""
    config, data = run.config, run.dataset
    if data is not None:
        skipped = f", {data.skipped} skipped (fewer than two turns)" if data.skipped else ""
        return (
            f"dataset {data.source} ({data.format}, sha256 {data.sha256}): first {data.prompts} of {data.entries} "
            f"prompts{skipped}; output tokens from {'the dataset' if data.output_tokens == 'dataset' else 'max_tokens'}"
        )
    dists = [
        f"{what} {dist.label()}"
        for what, dist in (("input", config.input_distribution), ("output", config.output_distribution))
        if dist is not None
    ]
    return "synthetic" + (f", lengths drawn per request: {', '.join(dists)} (seed {config.seed})" if dists else "")


def fingerprint(run: RunResult) -> dict[str, str]:
    """The run's fingerprint, field -> value, in reading order (fields a run does not know left out)."""
    meta, config = run.metadata, run.config
    deployed = meta.deployment or {}
    serving = deployed.get("serving") or {}
    version = (meta.server_version or {}).get("version") or deployed.get("vllm_version") or serving.get("vllm_version")
    fields: dict[str, str | None] = {
        "model": config.model,
        "model id": serving.get("model_id"),
        "revision": serving.get("revision"),
        "profile": deployed.get("profile"),
        "instance": deployed.get("instance_type") and f"{deployed['instance_type']} ({deployed.get('gpu_count', '?')} GPU)",
        "region": deployed.get("region"),
        "image": deployed.get("image") or serving.get("image"),
        "vLLM version": version,
    }
    # The serving options under their registry names (vLLM's flags in snake case; args: the command line).
    fields |= {
        ("vLLM args" if key == "args" else key): " ".join(map(str, value)) if isinstance(value, list) else str(value)
        for key, value in sorted(serving.items())
        if key not in SHOWN and value not in (None, [])
    }
    fields |= {
        "load": f"{config.mode}, max_tokens {config.max_tokens}, warmup {config.warmup_label()}"
        + (f", rounds {config.rounds}" if config.mode == "burst" else "")
        + f", seed {config.seed}, salts {config.salt_mode}",
        "prompts": prompts_text(run),
        "engine": f"{meta.client} {meta.client_version}",
        "Python": meta.python_version or None,
        "client host": meta.hostname,
    }
    host = meta.client_host
    if host is not None:
        fields |= {
            "client CPU": " ".join(x for x in (host.cpu_model, host.cpus and f"({host.cpus} CPUs)") if x) or None,
            "client OS": host.platform,
            "client load (1 min)": _loads(host.load_average_start, host.load_average_end),
        }
    return {name: value for name, value in fields.items() if value}


def compare_fingerprints(baseline: RunResult, run: RunResult) -> list[FingerprintRow]:
    """Every field either run knows, in reading order, with both values."""
    base, this = fingerprint(baseline), fingerprint(run)
    names = list(this) + [name for name in base if name not in this]
    return [FingerprintRow(name, base.get(name, "-"), this.get(name, "-")) for name in names]
