"""Train a ViT with a pluggable positional scheme:  python train.py pos=2d_sin [key=value ...]

The same as `python -m vitpos ...` (vitpos/__main__.py); see vitpos/configs/train.yaml and README.md.
"""

from vitpos.__main__ import main

if __name__ == "__main__":
    main()
