"""Train with MaxText on probeflow shards, without changing MaxText.

    python -m probeflow.maxtext_train <config.yml> dataset_type=network \\
        network_train_files=<job output dir or manifest.json> [network_eval_files=…] \\
        [network_seed=…] [other network_* keys] [MaxText key=value …]

The ``network_*`` keys are taken out (see ``probeflow.maxtext_input.NetworkOptions``
for the list); ``dataset_type=network`` becomes MaxText's ``grain`` path, so MaxText
checkpoints the data iterator with the model; probeflow's train and eval factories are
installed in place of grain's; then MaxText's own training entry point
(``maxtext.trainers.pre_train.train.main``) runs with the remaining arguments.

Exit codes: 0 done, 2 bad arguments; MaxText's own errors propagate.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from .maxtext_input import NetworkConfigError, NetworkOptions, data_failures, install

USAGE = __doc__ or ""


def split_arguments(args: Sequence[str]) -> tuple[str, NetworkOptions | None, list[str]]:
    """``(config.yml, network options or None, MaxText's key=value arguments)``.

    Network options are returned when ``dataset_type=network`` is given; the MaxText
    arguments then say ``dataset_type=grain`` and name the shard files as grain's
    files (MaxText checks that they are set)."""
    if not args:
        raise NetworkConfigError("missing the MaxText config file (e.g. configs/network_tiny.yml)")
    config, rest = args[0], list(args[1:])
    if "=" in config:
        raise NetworkConfigError(f"the first argument must be the MaxText config file, got {config!r}")
    network: dict[str, str] = {}
    passthrough: list[str] = []
    dataset_type = None
    for arg in rest:
        key, sep, value = arg.partition("=")
        if not sep:
            raise NetworkConfigError(f"expected key=value, got {arg!r}")
        if key.startswith("network_"):
            if key in network:
                raise NetworkConfigError(f"{key} given twice")
            network[key] = value
        elif key == "dataset_type":
            dataset_type = value
        else:
            passthrough.append(arg)
    if dataset_type != "network":
        if network:
            raise NetworkConfigError(
                f"network_* keys need dataset_type=network (got dataset_type={dataset_type!r})"
            )
        if dataset_type is not None:
            passthrough.append(f"dataset_type={dataset_type}")
        return config, None, passthrough
    options = NetworkOptions.from_keys(network)
    for key in ("grain_train_files", "grain_eval_files"):
        if any(a.startswith(key + "=") for a in passthrough):
            raise NetworkConfigError(f"{key} cannot be combined with dataset_type=network")
    passthrough += [
        "dataset_type=grain",
        f"grain_train_files={options.train_files}",
        f"grain_eval_files={options.eval_files or options.train_files}",
    ]
    return config, options, passthrough


def resolve_config(path: str) -> str:
    """``path`` if it exists, else the config of that name shipped with probeflow."""
    if os.path.exists(path):
        return path
    shipped = os.path.join(os.path.dirname(__file__), "configs", os.path.basename(path))
    if os.path.exists(shipped):
        return shipped
    raise NetworkConfigError(
        f"config file {path!r} not found (shipped configs: {', '.join(sorted(os.listdir(os.path.dirname(shipped))))})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    try:
        config, options, passthrough = split_arguments(args)
        config = resolve_config(config)
    except NetworkConfigError as e:
        print(f"probeflow.maxtext_train: {e}\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        from absl import app  # noqa: PLC0415
        from maxtext.trainers.pre_train import train  # noqa: PLC0415
    except ImportError as e:
        print(f"probeflow.maxtext_train: MaxText is not importable ({e}); pip install maxtext==0.2.5", file=sys.stderr)
        return 2
    if options is not None:
        install(options)
    code = 0
    try:
        app.run(train.main, argv=["probeflow.maxtext_train", config, *passthrough])
    except SystemExit as e:  # absl exits when main returns
        code = int(e.code or 0) if not isinstance(e.code, str) else 1
    # MaxText ends training quietly (exit 0, "Training stopped") when the data iterator
    # raises: a corrupt shard must not pass for a finished run.
    failures = data_failures()
    for stream, error in failures:
        print(
            f"probeflow.maxtext_train: the data stream failed ({stream}): {type(error).__name__}: {error}\n"
            "MaxText stopped training at that step; the run is not complete.",
            file=sys.stderr,
        )
    return 1 if failures and code == 0 else code


if __name__ == "__main__":
    sys.exit(main())
