"""TextWorld generated games: ``settings`` (game identity), ``games`` (generation, cache, expert-check CLI),
``maps`` (hand-built maps), ``env`` (``TextWorldEnv``), ``family`` (``TextWorldFamily``), ``strategies`` (strategy
experts), ``spec`` (the registry entry). Importing the package imports none of them."""
