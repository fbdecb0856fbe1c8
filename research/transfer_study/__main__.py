"""python -m research.transfer_study --out=runs/transfer [--config=configs/mini.py]: study.py."""

from research.transfer_study import study

if __name__ == '__main__':
  study.command_line()
