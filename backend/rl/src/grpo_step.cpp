// One GRPO step over every policy at once, and the held-out evaluation.

#include <chrono>
#include <cmath>
#include <optional>

#include "grpo_impl.h"
#include "spindle/core/error.h"
#include "spindle/engine/sampler.h"
#include "spindle/rl/advantages.h"

namespace spindle::rl {
namespace {

using Clock = std::chrono::steady_clock;
using Completions = std::vector<engine::Completion>;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The spec's best total, assuming every term scores in [0, 1].
double max_total(const rewards::RewardSpec& spec) {
  double m = 0.0;
  for (const auto& t : spec.terms) m += std::max(0.0, t.weight);
  return m;
}

}  // namespace

std::vector<StepMetrics> GrpoRun::Impl::step(int64_t step) {
  const auto t0 = Clock::now();
  const size_t K = policies.size();
  const int32_t G = config.group_size, P = config.prompts_per_step;
  std::vector<StepMetrics> metrics(K);

  // 1. Every policy's sample jobs at once: they batch together in the scheduler.
  std::vector<std::vector<size_t>> rows(K);
  std::vector<std::vector<std::vector<int32_t>>> prompts(K);
  std::vector<std::vector<detail::Pending<Completions>>> sampled(K);
  for (detail::PolicyState& p : policies) {
    sampled[p.index].resize(size_t(P));
    for (int32_t j = 0; j < P; ++j) {
      const uint64_t draw = uint64_t(step - 1) * uint64_t(P) + uint64_t(j);
      const size_t row = data_index(p.seed, draw, p.data.train.size());
      rows[p.index].push_back(row);
      prompts[p.index].push_back(encode_prompt(p.data.train[row].prompt));
      detail::check_submitted(
          p.engine->sample(prompts[p.index].back(), G,
                           sampling(engine::sample_seed(p.seed, 1u << 20 | draw), /*greedy=*/false),
                           sampled[p.index][size_t(j)].callback()),
          "sample");
    }
  }
  std::vector<std::vector<Completions>> groups(K);
  int64_t sampled_tokens = 0;
  for (size_t k = 0; k < K; ++k) {
    for (auto& s : sampled[k]) {
      groups[k].push_back(s.get("sample " + policies[k].config->name));
      for (const auto& c : groups[k].back()) sampled_tokens += int64_t(c.tokens.size());
    }
  }
  const double sample_s = seconds_since(t0);

  // 2. Rewards and advantages; KL to the base needs the base's logprobs of every completion.
  std::vector<GroupAdvantages> adv(K);
  std::vector<std::vector<detail::Pending<std::vector<float>>>> base_lp(K);
  for (detail::PolicyState& p : policies) {
    const size_t k = p.index;
    std::vector<rewards::RewardItem> items;
    for (int32_t j = 0; j < P; ++j) {
      const PromptRow& row = p.data.train[rows[k][size_t(j)]];
      for (const auto& c : groups[k][size_t(j)]) {
        items.push_back({row.prompt, c.text, c.tokens, row.reference, row.metadata_json});
      }
    }
    const rewards::RewardBatch rb = scorer->score(p.config->reward, items);
    StepMetrics& m = metrics[k];
    m.policy = p.config->name;
    m.step = step;
    m.trained = true;
    double sum = 0.0, sq = 0.0;
    for (double r : rb.total) sum += r;
    m.reward_mean = sum / double(rb.total.size());
    for (double r : rb.total) sq += (r - m.reward_mean) * (r - m.reward_mean);
    m.reward_std = std::sqrt(sq / double(rb.total.size()));
    for (size_t t = 0; t < p.config->reward.terms.size(); ++t) {
      double s = 0.0;
      for (double v : rb.per_term[t]) s += v;
      m.term_means[p.config->reward.terms[t].name] = s / double(rb.per_term[t].size());
    }
    adv[k] = group_advantages(rb.total, G, p.config->advantage, p.config->drop_uniform_groups);
    m.dropped_groups = adv[k].dropped_groups;
    if (p.config->kl_coef > 0.0f) {
      base_lp[k].resize(items.size());
      size_t i = 0;
      for (int32_t j = 0; j < P; ++j) {
        for (const auto& c : groups[k][size_t(j)]) {
          if (adv[k].keep[i] && !c.tokens.empty()) {
            std::vector<int32_t> tokens = prompts[k][size_t(j)];
            tokens.insert(tokens.end(), c.tokens.begin(), c.tokens.end());
            detail::check_submitted(
                p.engine->base_logprobs(std::move(tokens), base_lp[k][i].callback()), "logprobs");
          }
          ++i;
        }
      }
    }
  }

  // 3. Data: prompt ++ completion; weight 1/N on completion tokens, per-token advantages.
  std::vector<std::vector<engine::TrainDatum>> data(K);
  for (detail::PolicyState& p : policies) {
    const size_t k = p.index;
    StepMetrics& m = metrics[k];
    int64_t n_tokens = 0, n_completions = 0;
    double neg_logp = 0.0, kl_sum = 0.0;
    for (const auto& group : groups[k]) {
      for (const auto& c : group) {
        n_completions += 1;
        for (float lp : c.logprobs) neg_logp -= lp;
        n_tokens += int64_t(c.tokens.size());
      }
    }
    m.response_length = n_completions ? double(n_tokens) / double(n_completions) : 0.0;
    m.entropy = n_tokens ? neg_logp / double(n_tokens) : 0.0;
    int64_t train_tokens = 0;
    size_t i = 0;
    for (const auto& group : groups[k]) {
      for (const auto& c : group) train_tokens += adv[k].keep[i++] ? int64_t(c.tokens.size()) : 0;
    }
    i = 0;
    for (int32_t j = 0; j < P; ++j) {
      const std::vector<int32_t>& prompt = prompts[k][size_t(j)];
      for (const auto& c : groups[k][size_t(j)]) {
        const size_t item = i++;
        if (!adv[k].keep[item] || c.tokens.empty()) continue;
        std::vector<int32_t> seq = prompt;
        seq.insert(seq.end(), c.tokens.begin(), c.tokens.end());
        const size_t n = seq.size() - 1, first = prompt.size() - 1;
        engine::TrainDatum d;
        d.input_tokens.assign(seq.begin(), seq.end() - 1);
        d.target_tokens.assign(seq.begin() + 1, seq.end());
        d.weights.assign(n, 0.0f);
        d.logprobs.assign(n, 0.0f);
        d.advantages.assign(n, 0.0f);
        std::vector<float> token_adv(c.tokens.size(), adv[k].advantages[item]);
        if (p.config->kl_coef > 0.0f) {
          std::vector<float> base = base_lp[k][item].get("base logprobs " + p.config->name);
          kl_sum += apply_kl_penalty(adv[k].advantages[item], p.config->kl_coef, c.logprobs,
                                     {base.data() + prompt.size(), c.tokens.size()}, token_adv);
        }
        for (size_t t = 0; t < c.tokens.size(); ++t) {
          d.weights[first + t] = 1.0f / float(train_tokens);
          d.logprobs[first + t] = c.logprobs[t];
          d.advantages[first + t] = token_adv[t];
        }
        data[k].push_back(std::move(d));
      }
    }
    m.kl = train_tokens ? kl_sum / double(train_tokens) : 0.0;
  }

  const double reward_s = seconds_since(t0) - sample_s;

  // 4. Every policy's forward_backward at once (one merged pass when losses agree), then each
  // policy's optim_step (queued behind it in the session's FIFO).
  std::vector<detail::Pending<scheduler::TrainBatchResult>> fb(K);
  std::vector<detail::Pending<engine::OptimStepResult>> opt(K);
  std::vector<bool> trained(K, false);
  // One intake of the local scheduler: the local policies' jobs merge into one pass (engines on
  // workers merge there, per worker).
  std::optional<scheduler::Scheduler::IntakeHold> hold(*ctx.scheduler);
  for (detail::PolicyState& p : policies) {
    trained[p.index] = !data[p.index].empty();
    if (!trained[p.index]) continue;  // every group dropped: nothing to learn this step
    detail::check_submitted(
        p.engine->forward_backward(std::move(data[p.index]), p.config->loss,
                                   p.config->loss_config, fb[p.index].callback()),
        "forward_backward");
  }
  hold.reset();
  for (detail::PolicyState& p : policies) {
    if (!trained[p.index]) continue;
    engine::AdamParams adam;
    adam.learning_rate = p.config->learning_rate;
    adam.grad_clip_norm = 1.0f;
    detail::check_submitted(p.engine->optim_step(adam, opt[p.index].callback()), "optim_step");
  }
  for (detail::PolicyState& p : policies) {
    if (!trained[p.index]) continue;
    const auto r = fb[p.index].get("forward_backward " + p.config->name);
    metrics[p.index].loss = r.metrics.loss;
    metrics[p.index].clip_fraction = r.metrics.clip_fraction();
    metrics[p.index].grad_norm = opt[p.index].get("optim_step " + p.config->name).grad_norm;
  }
  const double step_s = seconds_since(t0);
  for (StepMetrics& m : metrics) {
    m.step_time_s = step_s;
    m.sample_time_s = sample_s;
    m.reward_time_s = reward_s;
    m.tokens_per_s = sample_s > 0 ? double(sampled_tokens) / sample_s : 0.0;
  }
  return metrics;
}

void GrpoRun::Impl::evaluate(std::vector<StepMetrics>& metrics) {
  std::vector<std::vector<detail::Pending<Completions>>> pending(policies.size());
  for (detail::PolicyState& p : policies) {
    const size_t n = std::min(p.data.heldout.size(), size_t(config.eval_prompts));
    pending[p.index].resize(n);
    for (size_t i = 0; i < n; ++i) {
      detail::check_submitted(
          p.engine->sample(encode_prompt(p.data.heldout[i].prompt), 1,
                           sampling(0, /*greedy=*/true), pending[p.index][i].callback()),
          "eval sample");
    }
  }
  for (detail::PolicyState& p : policies) {
    std::vector<rewards::RewardItem> items;
    for (size_t i = 0; i < pending[p.index].size(); ++i) {
      const Completions c = pending[p.index][i].get("eval sample " + p.config->name);
      const PromptRow& row = p.data.heldout[i];
      items.push_back({row.prompt, c.at(0).text, c.at(0).tokens, row.reference,
                       row.metadata_json});
    }
    if (items.empty()) continue;
    const rewards::RewardBatch rb = scorer->score(p.config->reward, items);
    const rewards::RewardSpec& spec = p.config->reward;
    size_t term = spec.terms.size();
    for (size_t t = 0; t < spec.terms.size(); ++t) {
      if (spec.terms[t].name == p.config->eval_metric_term) term = t;
    }
    const double best = max_total(spec);
    double correct = 0.0, total = 0.0;
    for (size_t i = 0; i < items.size(); ++i) {
      total += rb.total[i];
      const bool ok = term < spec.terms.size() ? rb.per_term[term][i] >= 1.0 - 1e-9
                                               : rb.total[i] >= best - 1e-9;
      correct += ok ? 1.0 : 0.0;
    }
    metrics[p.index].eval_accuracy = correct / double(items.size());
    metrics[p.index].eval_reward = total / double(items.size());
  }
}

}  // namespace spindle::rl
