"""Generation: videos from (first frame, prompt) pairs with a base model, adapters and several seeds."""
