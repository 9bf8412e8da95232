"""The user's own files in a conversation: read to text (extract), put into what the model reads
(whole, or the passages a question needs: prompt and passages), and folders of documents kept
searchable (folder). Qt-free: the window, the terminal and the server all attach through here."""
