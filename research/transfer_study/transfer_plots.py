"""The transfer study's two plots, drawn from its results.json (benchmark-only: matplotlib)."""

import statistics


def _pyplot():
  import matplotlib  # pylint: disable=g-import-not-at-top  (benchmark-only dependency)
  matplotlib.use('Agg')
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  return pyplot


def plot_pretraining(pretraining: dict, labels: dict[str, str], path: str):
  """Held-out MLM accuracy and discriminator AUC against FLOPs, a line per objective of `labels`
  (objective -> its name) that has an evaluation curve in `pretraining`."""
  plt = _pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  for ax, key, title in zip(axes, ('eval_mlm_accuracy', 'eval_disc_auc'),
                            ('held-out MLM accuracy', 'held-out discriminator AUC')):
    for objective, name in labels.items():
      curve = [m for m in ((pretraining[objective] or {}).get('eval_curve') or []) if key in m]
      if curve:
        ax.plot([m['flops'] for m in curve], [m[key] for m in curve], marker='o', markersize=3,
                label=name)
    ax.set(title=title, xlabel='pretraining FLOPs')
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def plot_finetuning(finetuning: dict, labels: dict[str, str], path: str):
  """Every seed's dev score and each run's median, per task and metric; `labels` names each
  fine-tuning run of `finetuning` (run -> task -> summary or None)."""
  plt = _pyplot()
  panels = [('SST-2', 'accuracy'), ('MRPC', 'accuracy'), ('MRPC', 'f1')]
  runs = list(finetuning)
  fig, axes = plt.subplots(1, len(panels), figsize=(12, 4))
  fig.suptitle('fine-tuning: a dot per seed, a bar at the median')
  for ax, (task, metric) in zip(axes, panels):
    for x, run in enumerate(runs):
      summary = finetuning[run][task]
      if summary is None:
        continue
      values = [100 * s[metric] for s in summary['seeds'].values()]
      ax.scatter([x] * len(values), values, alpha=0.7)
      ax.hlines(statistics.median(values), x - 0.3, x + 0.3, color='black')
    ax.set_xticks(range(len(runs)), [labels[r].replace(', ', '\n') for r in runs], fontsize=8)
    ax.set(title=f'{task} dev {metric}')
    ax.grid(axis='y', alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
