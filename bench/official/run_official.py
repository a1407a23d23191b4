"""Runs an official script (argv[1], relative to $YOLOV9_OFFICIAL) with the remaining arguments,
offline: stubs torch.utils.tensorboard when the tensorboard package is absent (Debian ships no
python3-tensorboard; the official loggers import it unconditionally), and gives the official
check_font() a local TrueType font as Arial.ttf in a temporary config folder (it would otherwise
download one). A benchmark needs neither TensorBoard output nor that font's looks."""
import glob
import os
import runpy
import shutil
import sys
import tempfile
import types

if "YOLOV5_CONFIG_DIR" not in os.environ:
    cfg = tempfile.mkdtemp(prefix="y9_official_cfg_")
    fonts = sorted(glob.glob("/usr/share/fonts/truetype/**/*.ttf", recursive=True))
    if fonts:
        shutil.copy(fonts[0], os.path.join(cfg, "Arial.ttf"))
    os.environ["YOLOV5_CONFIG_DIR"] = cfg

try:
    import tensorboard  # noqa: F401
except ImportError:
    class _NoWriter:
        def __init__(self, *a, **k):
            pass

        def __getattr__(self, name):
            return lambda *a, **k: None

    stub = types.ModuleType("torch.utils.tensorboard")
    stub.SummaryWriter = _NoWriter
    sys.modules["torch.utils.tensorboard"] = stub

root = os.environ["YOLOV9_OFFICIAL"]
script = os.path.join(root, sys.argv[1])
sys.argv = [script] + sys.argv[2:]
sys.path.insert(0, root)
runpy.run_path(script, run_name="__main__")
