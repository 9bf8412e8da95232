"""The recurrent drafter (ReDrafter): a small head over the target's hidden state, trained on the
model's own answers, drafting by beam search (beams.py); its files and training."""
