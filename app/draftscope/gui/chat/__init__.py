"""The chat: the transcript (view), its rendering to rich text (render), the message box
(composer) and the conversation list."""
