// The GRPO run config's field table: defaults and docs follow spindle/rl/config.h and the
// checks of backend/rl/src/config.cpp (validate_run_config).

#include "spindle/ui/run_config_fields.h"

namespace spindle::ui {

namespace {

RunConfigField fld(FieldScope scope, QString key, QString label, FieldKind kind, QVariant initial,
                   QString doc, QStringList choices = {}, bool omit_when_empty = false) {
  return RunConfigField{scope,           std::move(key), std::move(label),   kind,
                        std::move(initial), std::move(doc), std::move(choices), omit_when_empty};
}

std::vector<RunConfigField> make_fields() {
  using S = FieldScope;
  using K = FieldKind;
  const QString kReward =
      R"({"terms": [{"name": "correct", "plugin": "numeric_match", "weight": 1}]})";
  return {
      // ---- run ---------------------------------------------------------------------------
      fld(S::run, "steps", "Steps", K::integer, qint64(20),
       "Training steps of the run (>= 1). Each step samples group_size completions for each of "
       "prompts_per_step prompts per policy, scores them and takes one optimizer step."),
      fld(S::run, "group_size", "Group size", K::integer, qint64(8),
       "Completions sampled per prompt, in [2, 256]. GRPO's advantage compares the rewards "
       "within a group."),
      fld(S::run, "prompts_per_step", "Prompts per step", K::integer, qint64(8),
       "Prompts drawn from the dataset per step and policy, in [1, 1024]."),
      fld(S::run, "max_tokens", "Max tokens", K::integer, qint64(16),
       "Longest completion in tokens (>= 1)."),
      fld(S::run, "temperature", "Temperature", K::number, 1.0,
       "Sampling temperature (> 0: GRPO needs diverse samples)."),
      fld(S::run, "eval_every", "Eval every", K::integer, qint64(10),
       "Held-out evaluation every N steps (>= 0); 0 = only before the first and after the last "
       "step. Needs eval_prompts > 0."),
      fld(S::run, "save_every", "Save every", K::integer, qint64(10),
       "Save a revision of every policy every N steps (>= 0); 0 = only after the last step."),
      fld(S::run, "eval_prompts", "Eval prompts", K::integer, qint64(100),
       "Held-out prompts per evaluation (>= 0; 0 = no evaluation): greedy completions scored "
       "for eval_accuracy."),
      fld(S::run, "seed", "Seed", K::integer, qint64(0),
       "Seed of the data order and sampling. Both depend only on (seed, step), so a resumed run "
       "takes the steps it would have taken."),
      // ---- policy ------------------------------------------------------------------------
      fld(S::policy, "name", "Name", K::text, QString(),
       "The policy's name in the catalog (required, unique within the run). A new name creates "
       "the policy; an existing one is continued from its head when 'Resume' is checked."),
      fld(S::policy, "rank", "LoRA rank", K::integer, qint64(8),
       "LoRA rank r, in [1, 256] (new policies only)."),
      fld(S::policy, "alpha", "LoRA alpha", K::number, 16.0,
       "LoRA scale numerator (> 0): the update is (alpha / rank) B A x. Default 2 x rank."),
      fld(S::policy, "targets", "Targets", K::text_list, QStringList(),
       "Modules that get adapters: q, k, v, o, gate, up, down, lm_head. Empty = q, k, v, o, "
       "gate, up, down."),
      fld(S::policy, "learning_rate", "Learning rate", K::number, 1e-4,
       "AdamW learning rate (> 0)."),
      fld(S::policy, "loss", "Loss", K::choice, QString("ppo"),
       "Policy-gradient loss: ppo (clipped ratio), importance_sampling (unclipped ratio), cispo "
       "(clipped importance weight, gradient through every token), dro (squared penalty, beta). "
       "cross_entropy is supervised only and refused for GRPO.",
       {"ppo", "importance_sampling", "cispo", "dro"}),
      fld(S::policy, "loss_config.clip_low_threshold", "Clip low", K::number, 0.8,
       "Lower ratio clip of ppo and cispo: 0 < low <= 1."),
      fld(S::policy, "loss_config.clip_high_threshold", "Clip high", K::number, 1.2,
       "Upper ratio clip of ppo and cispo (>= 1; 1.28 is DAPO's clip-higher)."),
      fld(S::policy, "loss_config.beta", "DRO beta", K::number, 0.05,
       "dro's penalty weight (>= 0)."),
      fld(S::policy, "kl_coef", "KL coefficient", K::number, 0.0,
       "Weight of the KL penalty to the base model (>= 0; 0 = none)."),
      fld(S::policy, "advantage", "Advantage", K::choice, QString("grpo"),
       "grpo: (r - mean) / (std + 1e-6) within each group; dr_grpo: r - mean (Dr. GRPO, no std "
       "normalisation).",
       {"grpo", "dr_grpo"}),
      fld(S::policy, "drop_uniform_groups", "Drop uniform groups", K::flag, true,
       "Skip groups whose completions all got the same reward (their advantage is 0)."),
      fld(S::policy, "dataset.name", "Dataset", K::choice, QString("arith"),
       "Prompt source: arith (the embedded arithmetic task), gsm8k, countdown (files under the "
       "data root), jsonl (a file of your own) or inline (the prompts below).",
       {"arith", "gsm8k", "countdown", "jsonl", "inline"}),
      fld(S::policy, "dataset.path", "JSONL path", K::text, QString(),
       "jsonl only (required): the file; relative paths are under the daemon's data root.", {},
       true),
      fld(S::policy, "dataset.prompt_template", "Prompt template", K::text, QString(),
       "\"{field}\" placeholders filled from each row, e.g. \"Q: {question}\\nA:\"; empty = the "
       "dataset's default.",
       {}, true),
      fld(S::policy, "dataset.reference_field", "Reference field", K::text, QString(),
       "jsonl: the row field holding the reference answer the reward compares with.", {}, true),
      fld(S::policy, "dataset.heldout_size", "Held-out size", K::integer, qint64(-1),
       "Rows kept out of training for evaluation; -1 = the dataset's default.", {}, true),
      fld(S::policy, "dataset.prompts", "Inline prompts", K::text_list, QStringList(),
       "inline only (required): the prompts, one per line.", {}, true),
      fld(S::policy, "reward", "Reward spec", K::json, kReward,
       "The reward spec (JSON, from the reward designer): weighted terms, each a reward plugin "
       "with its config. At least one term."),
      fld(S::policy, "eval_metric_term", "Eval metric term", K::text, QString(),
       "The reward term whose success counts as held-out accuracy; empty = the total reaching "
       "the spec's maximum.",
       {}, true),
  };
}

}  // namespace

const std::vector<RunConfigField>& runConfigFields() {
  static const std::vector<RunConfigField> fields = make_fields();
  return fields;
}

const RunConfigField* findRunConfigField(FieldScope scope, const QString& key) {
  for (const RunConfigField& f : runConfigFields())
    if (f.scope == scope && f.key == key) return &f;
  return nullptr;
}

QStringList builtinDatasetNames() { return {"arith", "gsm8k", "countdown", "jsonl", "inline"}; }

}  // namespace spindle::ui
