"""Detection data in the formats users have, as a YOLO ``data.yaml``: a YOLO data.yaml as it is,
a COCO or Pascal VOC set converted once into a cache of our own (:func:`prepare_yolo_data`).

One job a module: :mod:`.prepare` (the entry point), :mod:`.detect` (which format a path holds),
:mod:`.coco` (COCO JSON) with :mod:`.rle` (its RLE masks), :mod:`.voc` (Pascal VOC XML) with
:mod:`.paddlex` (PaddleX's list files), :mod:`.labels` (label lines and the label kind each YOLO
task writes), :mod:`.images` (image sizes checked), :mod:`.cache` (the cache folder, its
fingerprint and lock), :mod:`.source` (what a conversion reads and returns). The rules of each
format are in its module's docstring (also in the README's "Your data"); every path read from a
data file is confined to its data root (:func:`autoprune.engine.paths.confined`) and every fact
a data file states that can be checked (image sizes, class names) is checked.
"""
from .cache import MARKER, VERSION, cache_dir_for
from .detect import FORMATS, detect_format
from .images import check_image_size, image_size
from .labels import BOXES, TOLERANCE, LabelKind, known_kinds, label_kind
from .prepare import prepare_yolo_data
from .rle import decode_rle, rle_counts
from .source import DataSource

__all__ = ["BOXES", "DataSource", "FORMATS", "LabelKind", "MARKER", "TOLERANCE", "VERSION",
           "cache_dir_for", "check_image_size", "decode_rle", "detect_format", "image_size",
           "known_kinds", "label_kind", "prepare_yolo_data", "rle_counts"]
