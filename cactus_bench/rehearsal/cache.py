"""Write the rehearsal's tiny checkpoints into a Hugging Face hub cache, as a download would.

    hub = build_hub_cache()          # ~/.cache/cactus_bench/rehearsal_hub/hub (HF_HOME/hub)
    HF_HOME=<that folder minus /hub> HF_HUB_OFFLINE=1 python run.py model=qwen3_8b ...

Layout (what `huggingface_hub` reads offline, file_download.py `_hf_hub_download_to_cache_dir`
and `try_to_load_from_cache`): `models--<org>--<name>/blobs/<etag>` holds each file once (etag:
sha256 for LFS files such as safetensors, the git blob sha1 for the others);
`snapshots/<commit>/<file>` are relative symlinks to the blobs; `refs/<branch or tag>` holds the
commit hash, without a newline (hf_hub reads the file whole). A revision given as a 40-hex
commit hash is looked up in snapshots/ directly, a name through refs/ (None means "main").
So each revision a pair YAML pins gets: a commit hash -> a snapshot folder of that name; a branch
or tag -> refs/<it>; nothing -> refs/main. Unpinned commits are the sha1 of the file manifest,
so rebuilding the same files gives the same commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import zlib
from pathlib import Path

import torch

from cactus_bench.rehearsal.hub_models import HUB_MODELS, HubModel
from cactus_bench.rehearsal.tokenizers import write_tokenizer

BUILD_VERSION = 1  # bump when the files written here change: a stale cache is then rebuilt
MANIFEST = "cactus_rehearsal.json"
HOME_ENV = "CACTUS_BENCH_REHEARSAL_HOME"
QWEN3_TOKENIZER_ENV = "CACTUS_BENCH_QWEN3_TOKENIZER"
COMMIT_HASH = re.compile(r"^[0-9a-f]{40}$")
LFS_FILES = (".safetensors",)
HEAD_SCALE = 20.0  # final-norm gain: peaked next-token laws from random weights (see _weights)
LATER_LAYER_SCALE = 0.3  # damps layers 1.. so that members of a family stay alike
MEMBER_NOISE = 0.04  # relative noise per checkpoint: 1 - TV(p, q) ~0.66 at T=0.6, top-k 20 (Qwen3)


def default_home() -> Path:
    """HF_HOME for the rehearsal: $CACTUS_BENCH_REHEARSAL_HOME or ~/.cache/cactus_bench/..."""
    default = Path.home() / ".cache" / "cactus_bench" / "rehearsal_hub"
    return Path(os.environ.get(HOME_ENV) or default).expanduser()


def default_qwen3_dir() -> Path:
    """$CACTUS_BENCH_QWEN3_TOKENIZER or ../shared/tokenizers/qwen3 next to the checkout."""
    repo = Path(__file__).resolve().parents[2]
    return Path(os.environ.get(QWEN3_TOKENIZER_ENV) or repo.parent / "shared/tokenizers/qwen3")


def build_hub_cache(
    home: Path | None = None,
    revisions: dict[str, list[str | None]] | None = None,
    qwen3_dir: Path | None = None,
    force: bool = False,
) -> Path:
    """Write every repo of `revisions` (repo id -> revisions the YAMLs pin; default: every
    HUB_MODELS repo at main) under `home`/hub and return that hub folder. Repos already built
    by this BUILD_VERSION with the same revisions are kept unless `force`."""
    home = Path(home) if home is not None else default_home()
    qwen3_dir = Path(qwen3_dir) if qwen3_dir is not None else default_qwen3_dir()
    if not (qwen3_dir / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"no Qwen3 tokenizer at {qwen3_dir}; point {QWEN3_TOKENIZER_ENV} at a folder with "
            "tokenizer.json and tokenizer_config.json (see ../shared/tokenizers/README.md)"
        )
    revisions = revisions or {repo: [None] for repo in HUB_MODELS}
    hub = home / "hub"
    hub.mkdir(parents=True, exist_ok=True)
    manifest_path = hub / MANIFEST
    manifest = _read_manifest(manifest_path)
    for repo_id, wanted in sorted(revisions.items()):
        entry = {"version": BUILD_VERSION, "revisions": sorted(wanted, key=str)}
        repo_dir = hub / repo_folder(repo_id)
        if not force and manifest.get(repo_id) == entry and repo_dir.is_dir():
            continue
        shutil.rmtree(repo_dir, ignore_errors=True)
        _write_repo(repo_dir, HUB_MODELS[repo_id], wanted, qwen3_dir)
        manifest[repo_id] = entry
        manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return hub


def repo_folder(repo_id: str) -> str:
    """`Qwen/Qwen3-8B` -> `models--Qwen--Qwen3-8B` (huggingface_hub's repo_folder_name)."""
    return "models--" + repo_id.replace("/", "--")


def _read_manifest(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write_repo(repo_dir: Path, spec: HubModel, revisions: list, qwen3_dir: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="rehearsal-") as scratch:
        files = Path(scratch)
        _write_files(files, spec, qwen3_dir)
        blobs = {path.name: _etag(path) for path in sorted(files.iterdir())}
        default_commit = hashlib.sha1(
            json.dumps([spec.repo_id, blobs], sort_keys=True).encode()
        ).hexdigest()
        (repo_dir / "blobs").mkdir(parents=True)
        for name, etag in blobs.items():
            shutil.copyfile(files / name, repo_dir / "blobs" / etag)
        for revision in revisions or [None]:
            pinned = revision is not None and COMMIT_HASH.match(revision)
            commit = revision if pinned else default_commit
            snapshot = repo_dir / "snapshots" / commit
            snapshot.mkdir(parents=True, exist_ok=True)
            for name, etag in blobs.items():
                link = snapshot / name
                if not link.exists():
                    link.symlink_to(Path("..") / ".." / "blobs" / etag)
            if not pinned:
                ref = repo_dir / "refs" / (revision or "main")
                ref.parent.mkdir(parents=True, exist_ok=True)
                ref.write_text(commit)  # no newline: hf_hub reads the whole file as the hash


def _etag(path: Path) -> str:
    """The hub's etag: sha256 of an LFS file, else the git blob sha1."""
    data = path.read_bytes()
    if path.suffix in LFS_FILES:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _write_files(folder: Path, spec: HubModel, qwen3_dir: Path) -> None:
    # Not at the top: `cactus_bench.rehearsal` imports without transformers (gpu_memory_table.py
    # reads its specs; rehearse.py only checks a cache already built).
    from safetensors.torch import save_file  # lazy: keeps safetensors out, as transformers
    from transformers import AutoConfig, AutoModelForCausalLM  # lazy: see above

    (folder / "config.json").write_text(json.dumps(spec.config, indent=2, sort_keys=True))
    (folder / "generation_config.json").write_text(
        json.dumps(spec.generation_config, indent=2, sort_keys=True)
    )
    write_tokenizer(spec.tokenizer, folder, qwen3_dir)
    config = AutoConfig.from_pretrained(str(folder))  # as a user's load reads it
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config)
    _weights(model, spec)
    tied = bool(model.config.tie_word_embeddings)
    dtype = getattr(torch, str(spec.config.get("torch_dtype", "float32")))
    state = {
        name: tensor.detach().to(dtype).contiguous()
        for name, tensor in model.state_dict().items()
        if not (tied and name == "lm_head.weight")  # tied checkpoints store the embedding only
    }
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "README.md").write_text(_readme(spec, tied))


def _family_normal(family: str, name: str, shape: tuple[int, ...], std: float) -> torch.Tensor:
    generator = torch.Generator().manual_seed(zlib.crc32(f"{family}/{name}".encode()))
    return torch.randn(shape, generator=generator) * std


@torch.no_grad()
def _weights(model: torch.nn.Module, spec: HubModel) -> None:
    """Random weights shared by a family, so a drafter agrees with its verifier often.

    Every matrix and bias is drawn from a seed of (family, parameter name); vocabulary-sized
    ones are the first V rows of one family-wide draw (the head equals the embedding, tied or
    not), so ids mean the same in every member. Decoder layers get each checkpoint's own noise;
    layers after the first are damped. The final norm's gain peaks the next-token laws.
    """
    std = float(getattr(model.config, "initializer_range", 0.02))
    family_vocab = max(m.vocab_size for m in HUB_MODELS.values() if m.family == spec.family)
    member = torch.Generator().manual_seed(zlib.crc32(spec.repo_id.encode()))
    for name, param in model.named_parameters():
        if "norm" in name:
            continue  # keep the class's own init (ones; Gemma's zeros mean a gain of 1)
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            full = _family_normal(spec.family, "embed", (family_vocab, param.shape[1]), std)
            param.copy_(full[: param.shape[0]])
            continue
        # Matrices keep the residual stream's scale (std 1/sqrt(fan_in)), so the layers, not
        # the current token's embedding, decide the next token; otherwise every model
        # predicts the token it just read and repeats it forever.
        scale = param.shape[1] ** -0.5 if param.dim() == 2 else std
        base = _family_normal(spec.family, name, tuple(param.shape), scale)
        noise = torch.randn(param.shape, generator=member) * scale * MEMBER_NOISE
        later = name.startswith("model.layers.") and not name.startswith("model.layers.0.")
        damp = LATER_LAYER_SCALE if later and ("o_proj" in name or "down_proj" in name) else 1.0
        param.copy_((base + noise) * damp)
    final_norm = model.model.norm.weight
    gemma_style = bool(torch.all(final_norm == 0))  # Gemma's RMSNorm multiplies by (1 + w)
    final_norm.fill_(HEAD_SCALE - 1.0 if gemma_style else HEAD_SCALE)


def _readme(spec: HubModel, tied: bool) -> str:
    tokenizer = (
        "the real Qwen3 tokenizer" if spec.tokenizer == "qwen3" else f"stand-in ({spec.tokenizer})"
    )
    real = ", ".join(f"{key}={value}" for key, value in spec.real_sizes.items())
    return (
        f"# {spec.repo_id}: cactus-bench rehearsal stand-in (NOT the real weights)\n\n"
        f"Tiny random weights with the real architecture class "
        f"({spec.config['architectures'][0]}), vocab_size {spec.vocab_size}, "
        f"tie_word_embeddings={tied} and the published config fields; sizes shrunk from "
        f"({real}). Tokenizer: {tokenizer}. Written by cactus_bench.rehearsal.\n"
    )
