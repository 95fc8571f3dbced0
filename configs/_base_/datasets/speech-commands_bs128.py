# Speech Commands v0.02 (arXiv:2104.07916 §4.3): the 35 words + "_unknown_" + "_silence_" (10 %
# silent clips) = 37 outputs, as in the group's speech pipeline. 1-s 16 kHz clips → 32 log-mel
# bands × 32 frames (n_fft 2048, hop 512, dB below the clip's maximum): a 1×32×32 input.
# Training: amplitude, speed/pitch, time stretch, time shift and background-noise mixing, each
# with probability 0.5, and a class-balanced sampler (with replacement). Validation: none.
# Data: speech_commands_v0.02.tar.gz extracted in data/speech_commands (word folders,
# _background_noise_/, validation_list.txt, testing_list.txt), or a synthetic set in the same
# layout from tools/dataset_converters/make_speech_commands.py.
dataset_type = 'SpeechCommands'
data_root = 'data/speech_commands'
num_classes = 37
data_preprocessor = dict(num_classes=num_classes)  # features in dB, not normalised

train_pipeline = [
    dict(type='LoadAudioFromFile', sample_rate=16000),
    dict(type='AudioAmplitude', scale_range=(0.7, 1.1), prob=0.5),
    dict(type='AudioSpeedPitch', max_scale=0.2, prob=0.5),
    dict(type='AudioFixLength', length=16000),
    dict(type='AudioToSTFT', n_fft=2048, hop_length=512),
    dict(type='STFTTimeStretch', max_scale=0.2, prob=0.5),
    dict(type='STFTTimeShift', max_shift=8, prob=0.5),
    dict(type='STFTFixFrames'),
    dict(type='AudioBackgroundNoise', max_ratio=0.45, prob=0.5),  # data_root/_background_noise_
    dict(type='LogMelSpectrogram', n_mels=32, sample_rate=16000),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadAudioFromFile', sample_rate=16000),
    dict(type='AudioFixLength', length=16000),
    dict(type='LogMelSpectrogram', n_mels=32, sample_rate=16000, n_fft=2048, hop_length=512),
    dict(type='PackInputs'),
]

train_dataloader = dict(
    batch_size=128,
    num_workers=2,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root=data_root, split='train', unknown=True,
                 silence_ratio=0.1, pipeline=train_pipeline),
    sampler=dict(type='ClassBalancedSampler'),
)
val_dataloader = dict(
    batch_size=256,
    num_workers=2,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root=data_root, split='val', unknown=True,
                 silence_ratio=0.1, pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = dict(
    batch_size=256,
    num_workers=2,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root=data_root, split='test', unknown=True,
                 silence_ratio=0.1, pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
test_evaluator = val_evaluator
