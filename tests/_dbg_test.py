import torch
from tests.test_rl_trainer import *  # noqa

def test_dbg(env_cfg, family, tiny, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one")
    tr = RLTrainer(make_cfg(env_cfg, tmp), family, StaticKnowledge.from_dict(BANK), tiny, tmp / "out", progress=False)
    print("\nATTN", tr.unwrapped().config._attn_implementation, tr.compute_dtype, next(tr.unwrapped().parameters()).dtype)
    groups = tr.route(0, tr.step_tasks(0)); tr.rollout(0, groups); samples, _ = tr.build_samples(0, groups)
    worst = None
    with torch.no_grad():
        tr.unwrapped().eval()
        for i in range(0, len(samples), 16):
            chunk = samples[i:i + 16]
            b = collate(chunk, tr.tok, tr.vocab, "cpu", tr.tries)
            new = token_logprobs(tr.model, b, tr.cfg.model.temperature)
            d = ((new - b.old_logprobs) * b.mask).abs()
            j = int(d.max(1).values.argmax())
            if worst is None or d.max() > worst[0]:
                worst = (float(d.max()), chunk[j].kind, len(chunk[j].prompt_ids), [round(x, 5) for x in chunk[j].old_logprobs], [round(x, 5) for x in (new[j][b.mask[j] > 0]).tolist()])
    print("WORST", worst)
