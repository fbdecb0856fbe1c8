"""The CPU transfer study: does pretraining pay off on a CPU budget? Its report is README.md.

python -m research.transfer_study --out=runs/transfer --config=configs/mini.py runs it (study.py);
each helper runs as python -m research.transfer_study.<name> --help, from the repository root.
"""

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
