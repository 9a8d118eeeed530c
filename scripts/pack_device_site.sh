#!/usr/bin/env bash
# Pack installed packages from .venv's site-packages into .pkgs/NAME.txz for a device call
# (device/h200_session.sh unpacks them into its site dir). xz -9 packs transformers to
# 3.9 MB against its 13.5 MB wheel, and Ray without its Java jars, dashboard UI and
# libraries the launcher never imports (data, train, tune, serve, rllib, llm) to 20 MB: what
# lets Ray, the wheels and the Triton cache fit one call's 64 MiB carry.
#   bash scripts/pack_device_site.sh ray transformers
set -eu
site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
mkdir -p .pkgs
ray_unused=(ray/jars ray/dashboard/client ray/data ray/train ray/tune ray/serve ray/rllib ray/llm)
for name in "$@"; do
    dist=$(cd "$site" && ls -d "${name}"-*.dist-info | head -1)
    excludes=(--exclude=__pycache__ --exclude='*/tests')
    [ "$name" = ray ] && excludes+=("${ray_unused[@]/#/--exclude=}")
    tar cf - -C "$site" "${excludes[@]}" "$name" "$dist" | xz -T0 -9 > ".pkgs/$name.txz"
    ls -la ".pkgs/$name.txz"
done
